"""The public price sources `gpuplan catalog refresh` reads, answered from recorded files
(tests/fixtures/price_sources/, see its README) through a requests transport adapter.

It answers only what the real services answer, and fails closed: a URL it does not know gets a
404 and is listed in `unknown`. Like the real Azure Retail Prices API it insists on
currencyCode='JPY' and a $filter with priceType and armRegionName, applies the filter's
armSkuName list to the recorded items, and pages by $skip as recorded: eastus, westus2, and the
two regions the shipped catalog has no rows in, japaneast and japanwest (issue 22), each with
Windows and Spot meters beside the Linux ones.

    fake = PriceSources(); session = fake.session()
    fake.status["prices.azure.com"] = 500        # every answer from that host is a 500
    fake.timeout.add("pricing.us-east-1.amazonaws.com")
    fake.requests                                  # every URL asked, in order
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "price_sources"
_AWS_CSV = re.compile(r"^/offers/v1\.0/aws/AmazonEC2/(\d{14})/([a-z0-9-]+)/index\.csv$")
_SAKURA = re.compile(r"^/cloud/zone/([a-z0-9]+)/api/cloud/1\.1/public/price$")
_DOK_UNIT_PRICES = "/cloud/zone/is1a/api/managed-container/1.0/unit_prices/"


class PriceSources(BaseAdapter):
    def __init__(self, root: Path = FIXTURES) -> None:
        super().__init__()
        self.root = root
        self.requests: list[str] = []
        self.unknown: list[str] = []
        self.status: dict[str, int] = {}  # host -> HTTP status every request to it gets
        self.timeout: set[str] = set()  # hosts that never answer

    def session(self) -> requests.Session:
        s = requests.Session()
        s.mount("https://", self)
        s.mount("http://", self)
        return s

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        self.requests.append(request.url)
        url = urlsplit(request.url)
        host = url.hostname or ""
        if request.method != "GET":
            return self._answer(request, 405, b"")
        if host in self.timeout:
            raise requests.exceptions.ReadTimeout(f"fake: {host} did not answer", request=request)
        if host in self.status:
            return self._answer(request, self.status[host], b'{"error": "fake failure"}')
        if url.path == _DOK_UNIT_PRICES and not request.headers.get("Authorization", "").startswith("Basic "):
            return self._answer(request, 401, b'{"detail": "fake: credentials required"}')
        body = self._route(host, url)
        if body is None:
            self.unknown.append(request.url)
            return self._answer(request, 404, b'{"error": "fake: unknown path"}')
        status, data, ctype = body
        return self._answer(request, status, data, ctype)

    def close(self) -> None:
        pass

    # --- routes ---------------------------------------------------------------------------

    def _route(self, host: str, url):
        path = url.path
        if host == "prices.azure.com" and path == "/api/retail/prices":
            return self._azure(parse_qs(url.query))
        if host == "pricing.us-east-1.amazonaws.com":
            if path == "/offers/v1.0/aws/AmazonEC2/current/region_index.json":
                return self._file("aws_region_index.json", "application/json")
            m = _AWS_CSV.match(path)
            if m:
                return self._file(f"aws_{m.group(2)}.csv", "text/csv")
        if host == "secure.sakura.ad.jp":
            m = _SAKURA.match(path)
            if m:
                return self._file(f"sakura_{m.group(1)}.json", "application/json; charset=UTF-8")
            if path == _DOK_UNIT_PRICES:
                return self._file("sakura_dok_unit_prices.json", "application/json")
        if host == "www.ecb.europa.eu" and path == "/stats/eurofxref/eurofxref-daily.xml":
            return self._file("ecb_eurofxref_daily.xml", "text/xml")
        return None

    def _azure(self, query: dict[str, list[str]]):
        odata = unquote(query.get("$filter", [""])[0])
        region = re.search(r"armRegionName eq '([^']+)'", odata)
        if query.get("currencyCode") != ["'JPY'"] or "priceType eq 'Consumption'" not in odata or not region:
            return 400, b'{"Error": "fake: expected currencyCode=\'JPY\' and a consumption filter by region"}', "application/json"
        skip = int(query.get("$skip", ["0"])[0])
        found = self._file(f"azure_{region.group(1)}_skip{skip}.json", "application/json")
        if found is None:
            return None
        page = json.loads(found[1])
        names = set(re.findall(r"armSkuName eq '([^']+)'", odata))
        if names:  # the service filters; the recording holds more sizes than one query asks for
            page["Items"] = [i for i in page["Items"] if i["armSkuName"] in names]
            page["Count"] = len(page["Items"])
        return 200, json.dumps(page).encode(), "application/json"

    def _file(self, name: str, ctype: str):
        path = self.root / name
        if not path.is_file():
            return None
        return 200, path.read_bytes(), ctype

    @staticmethod
    def _answer(request, status: int, data: bytes, ctype: str = "application/json"):
        raw = urllib3.response.HTTPResponse(
            body=io.BytesIO(data), status=status, preload_content=False,
            headers={"Content-Type": ctype, "Content-Length": str(len(data))},
        )
        return HTTPAdapter().build_response(request, raw)
