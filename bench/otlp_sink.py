"""An OTLP/gRPC trace collector that counts what it receives: the far end of the tracing
benchmark. Prints the span count on SIGTERM.

    python3 bench/otlp_sink.py PORT
"""
import signal
import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    spans = 0

    def Export(self, request, context):
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                Sink.spans += len(scope.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Sink(), server)
server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
server.start()


def stop(*_):
    print(f"spans received: {Sink.spans}", flush=True)
    server.stop(0)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
server.wait_for_termination()
