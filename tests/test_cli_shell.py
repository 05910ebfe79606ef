from gpuplan.errors import UsageError
from gpuplan.fleet import provider


def test_unknown_provider_is_a_usage_error_naming_the_known_ones():
    try:
        provider.get("nosuchcloud")
    except UsageError as exc:
        assert "unknown provider 'nosuchcloud'" in str(exc)
        assert "aws" in str(exc) and "azure" in str(exc)
    else:
        raise AssertionError("expected UsageError")


def test_unknown_command_exits_2(cli):
    r = cli("no-such-command")
    assert r.code == 2
