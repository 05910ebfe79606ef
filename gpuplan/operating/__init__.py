"""Operating: the state, providers' base contract, provisioning and teardown, SSH, playbooks,
running and measuring jobs. Uses planning's types (offers, profiles), never the other way round."""
