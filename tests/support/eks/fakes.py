"""Small fakes, each beside a real part it stands in for where no local real part exists.

- `ErrorProxy`: a real HTTP proxy on 127.0.0.1 in front of moto's server that answers
  chosen AWS operations with an error a set number of times (moto cannot throttle).
- `FakePricing`: the `pricing` client's `get_products` (moto lacks the Pricing API).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from servingbench.resources.http import control


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1:0 for a fake; `with` starts and stops it."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


class ErrorProxy(LoopbackServer):
    """Forwards to `upstream`; the first `times` requests whose X-Amz-Target ends with
    `operation` (JSON protocols) or whose `METHOD /path` starts with it (REST, e.g.
    `GET /clusters/bench/node-groups/`) get `status` and a JSON error `code` instead."""

    def __init__(self, upstream: str, operation: str, code: str, times: int, status: int = 400):
        self.upstream, self.operation, self.code = upstream, operation, code
        self.remaining, self.status = times, status
        self.seen: list[dict] = []  # every request: target and headers (for the leak scan)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target", "")
                proxy.seen.append({"target": target, "headers": dict(self.headers)})
                hit = (f"{self.command} {self.path}".startswith(proxy.operation)
                       if " /" in proxy.operation else target.endswith(proxy.operation))
                if hit and proxy.remaining > 0:
                    proxy.remaining -= 1
                    payload = json.dumps({"__type": proxy.code, "message": "Rate exceeded"})
                    self._reply(proxy.status, {"Content-Type": "application/x-amz-json-1.1"},
                                payload.encode())
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length", "connection")}
                r = httpx.request(self.command, proxy.upstream + self.path, headers=headers,
                                  content=body, verify=control.tls())
                keep = {k: v for k, v in r.headers.items()
                        if k.lower() in ("content-type", "x-amzn-requestid", "x-amzn-errortype")}
                self._reply(r.status_code, keep, r.content)

            def _reply(self, status, headers, body):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        self._serve(Handler)


def ec2_product(sku: str, instance_type: str, region: str, usd: str, *, os: str = "Linux",
                tenancy: str = "Shared", usagetype: str | None = None) -> dict:
    """A Price List product in the shape `get_products` returns (one JSON string each)."""
    term = f"{sku}.JRTCKXETXF"
    return {
        "serviceCode": "AmazonEC2",
        "product": {"sku": sku, "productFamily": "Compute Instance", "attributes": {
            "instanceType": instance_type, "regionCode": region, "operatingSystem": os,
            "tenancy": tenancy, "preInstalledSw": "NA", "capacitystatus": "Used",
            "licenseModel": "No License required", "servicename": "Amazon Elastic Compute Cloud",
            "usagetype": usagetype or f"BoxUsage:{instance_type}"}},
        "terms": {"OnDemand": {term: {
            "sku": sku, "offerTermCode": "JRTCKXETXF", "effectiveDate": "2026-11-01T00:00:00Z",
            "priceDimensions": {f"{term}.6YS6EN2CT7": {
                "unit": "Hrs", "pricePerUnit": {"USD": usd},
                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour"}}}}},
    }


class FakePricing:
    """`get_products` with TERM_MATCH filtering and one product per page."""

    service_name = "pricing"

    def __init__(self, products: list[dict]):
        self.products = products
        self.requests: list[dict] = []

    def get_products(self, **kwargs):
        self.requests.append(kwargs)
        assert kwargs["ServiceCode"] == "AmazonEC2"
        match = [p for p in self.products if all(
            f["Type"] == "TERM_MATCH" and p["product"]["attributes"].get(f["Field"]) == f["Value"]
            for f in kwargs.get("Filters", []))]
        start = int(kwargs.get("NextToken") or 0)
        page = {"FormatVersion": "aws_v1", "PriceList": [json.dumps(p) for p in match[start:start + 1]]}
        if start + 1 < len(match):
            page["NextToken"] = str(start + 1)
        return page
