"""The AWS fake's server: moto in server mode behind a WSGI layer that routes EC2, the Price List API and
the Spot Advisor feed, with the knobs and the call log."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from werkzeug.serving import WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from geotrain.pricing import interruption
from tests.fakes.aws.data import data
from tests.fakes.aws.ec2 import EC2_ERRORS, EC2_HANDLERS, ec2_xml, Ec2Error, Query
from tests.fakes.aws.vms import AwsVms, Hypervisor
from tests.fakes.aws.wire import ec2_error, json_error, json_or_query_action, matches, page, signed_region, signed_service

TYPES_XML: dict[tuple[bytes, int | None], str] = {}  # DescribeInstanceTypes pages (request body → answer)


class FakeAws:
    """The server; use as a context manager or call :meth:`stop`."""

    def __init__(self, hypervisor: Hypervisor | None = None) -> None:
        self.data = data()
        self.vms = AwsVms(self, hypervisor)  # instances: ClientToken, 127.0.0.N addresses, VMs, knobs (vms.py)
        self.page_size: int | None = None
        self.throttle: dict[str, int] = {}
        self.failing_regions: set[str] = set()
        self.denied: set[str] = set()
        self.bad_shape: set[str] = set()
        self.regions: set[str] | None = None
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        self._moto_app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True, request_handler=_QuietHandler)
        self.port = self._server.server_port
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.spot_advisor_url = f"{self.endpoint_url}/spot-advisor-data.json"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def __enter__(self) -> FakeAws:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()

    def reset(self) -> None:
        """Knobs back to their defaults, the call log emptied."""
        self.page_size, self.regions = None, None
        self.throttle, self.failing_regions, self.denied, self.bad_shape = {}, set(), set(), set()
        with self._lock:
            self.calls = []
        self.vms.reset()

    def count(self, operation: str) -> int:
        with self._lock:
            return sum(1 for op, _ in self.calls if op == operation)

    # ------------------------------------------------------------------ what the referee compares with

    def expected_rows(self, regions: Iterable[str] | None = None) -> dict[tuple[str, str, str, str, str], float]:
        """(cloud, region, zone, instance_type, market) → price of every bundled AWS row this fake serves
        in ``regions`` (all when None)."""
        wanted = None if regions is None else set(regions)
        return {("aws", r.region, r.zone, r.instance_type, r.market): float(r.price)
                for r in self.data.served if wanted is None or r.region in wanted}

    # ------------------------------------------------------------------ knobs

    def _take_throttle(self, operation: str) -> bool:
        with self._lock:
            left = self.throttle.get(operation, 0)
            if left > 0:
                self.throttle[operation] = left - 1
                return True
        return False

    def _record(self, operation: str, region: str) -> None:
        with self._lock:
            self.calls.append((operation, region))

    # ------------------------------------------------------------------ WSGI

    def _app(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        target = request.headers.get("X-Amz-Target", "")
        if target.startswith("AWSPriceListService."):
            response = self._pricing(request, target.split(".", 1)[1])
            return response(environ, start_response)
        if request.method == "GET" and request.path == "/spot-advisor-data.json":
            response = self._spot_advisor()
            return response(environ, start_response)
        body = request.get_data()
        environ["wsgi.input"] = io.BytesIO(body)  # moto reads the body again
        environ["CONTENT_LENGTH"] = str(len(body))
        region = signed_region(request.headers.get("Authorization", ""))
        service = signed_service(request.headers.get("Authorization", ""))
        if service == "ec2":
            action = (parse_qs(body.decode("utf-8", "replace")).get("Action") or [""])[0]
            self._record(action, region)
            error = None
            if action in self.denied:
                error = "denied"
            elif region in self.failing_regions:
                error = "fail"
            elif self._take_throttle(action):
                error = "throttle"
            if error:
                return ec2_error(*EC2_ERRORS[error])(environ, start_response)
            handler = EC2_HANDLERS.get(action)
            if action == "DescribeInstanceTypes" and not self.bad_shape:
                cached = TYPES_XML.get((body, self.page_size))
                if cached is not None:
                    return Response(cached, 200, content_type="text/xml")(environ, start_response)
            handled = self.vms.ec2(action, body, region, environ, start_response)
            if handled is not None:
                return handled
            if handler is not None:
                query = Query(parse_qs(body.decode("utf-8")), region, self)
                if query.flag("DryRun"):
                    response = ec2_error("DryRunOperation", 412, "Request would have succeeded, but DryRun flag is set.")
                else:
                    try:
                        xml = ec2_xml(action, handler(query))
                        if action == "DescribeInstanceTypes" and not self.bad_shape:
                            TYPES_XML[(body, self.page_size)] = xml  # the same list in every region
                        response = Response(xml, 200, content_type="text/xml")
                    except Ec2Error as exc:
                        response = ec2_error(exc.code, exc.status, exc.message)
                return response(environ, start_response)
        elif service:
            self._record(json_or_query_action(request, body), region)
            if service == "ssm":
                self.vms.before_ssm(region)
        return self._moto_app(environ, start_response)

    def _pricing(self, request: Request, operation: str) -> Response:
        self._record(operation, "us-east-1")
        if operation in self.denied:
            return json_error("AccessDeniedException", 400, "User is not authorized to perform: pricing:GetProducts")
        if self._take_throttle(operation):
            return json_error("ThrottlingException", 400, "Rate exceeded")
        if operation != "GetProducts":
            return json_error("InvalidParameterException", 400, f"{operation} is not served by this fake")
        try:
            params = json.loads(request.get_data() or b"{}")
        except ValueError:
            return json_error("InvalidParameterException", 400, "body is not JSON")
        filters = params.get("Filters") or []
        if any(f.get("Field") == "regionCode" and f.get("Value") in self.failing_regions for f in filters):
            return json_error("InternalErrorException", 500, "fake failing region")
        products = [p for p in self._products() if matches(p["product"]["attributes"], filters)]
        if params.get("ServiceCode") != "AmazonEC2":
            products = []
        chunk, token = page(products, params.get("NextToken"), params.get("MaxResults"), self.page_size)
        if "GetProducts" in self.bad_shape:
            entries = [json.dumps({"product": p["product"]}) for p in chunk]
        else:
            entries = [json.dumps(p) for p in chunk]
        answer: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": entries}
        if token:
            answer["NextToken"] = token
        return Response(json.dumps(answer), 200, content_type="application/x-amz-json-1.1")

    def _products(self) -> list[dict[str, Any]]:
        products = []
        for (region, itype), r in sorted(self.data.on_demand.items()):
            sku = hashlib.sha1(f"{region}/{itype}".encode()).hexdigest()[:16].upper()
            term = f"{sku}.JRTCKXETXF"
            attributes = {"servicecode": "AmazonEC2", "instanceType": itype, "regionCode": region,
                          "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                          "capacitystatus": "Used", "licenseModel": "No License required",
                          "vcpu": f"{r.vcpus:g}", "memory": f"{r.memory_gib:g} GiB",
                          "gpu": str(r.accelerator_count), "marketoption": "OnDemand"}
            products.append({
                "product": {"productFamily": "Compute Instance", "attributes": attributes, "sku": sku},
                "serviceCode": "AmazonEC2",
                "terms": {"OnDemand": {term: {
                    "priceDimensions": {f"{term}.6YS6EN2CT7": {
                        "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                        "rateCode": f"{term}.6YS6EN2CT7",
                        "description": f"${r.price} per On Demand Linux {itype} Instance Hour",
                        "pricePerUnit": {"USD": r.price}}},
                    "sku": sku, "effectiveDate": r.observed_at, "offerTermCode": "JRTCKXETXF",
                    "termAttributes": {}}}},
                "version": "20260121000000", "publicationDate": r.observed_at,
            })
        return products

    def _spot_advisor(self) -> Response:
        self._record("SpotAdvisorFeed", "")
        feed: dict[str, Any] = {
            "ranges": [{"index": b.index, "label": b.label, "dots": b.index, "max": m}
                       for b, m in zip(interruption.SPOT_ADVISOR_BANDS, (5, 11, 16, 22, 100), strict=True)],
            "spot_advisor": {region: {"Linux": {t: {"r": i} for t, i in sorted(types.items())}}
                             for region, types in sorted(self.data.bands.items())},
        }
        if "SpotAdvisorFeed" in self.bad_shape:
            del feed["ranges"]
        return Response(json.dumps(feed), 200, content_type="application/json")


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        return None
