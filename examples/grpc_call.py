#!/usr/bin/env python3
"""Calls the gateway's gRPC service the way grpcurl does, for machines without grpcurl.

    grpc_call.py [-plaintext] [-H 'authorization: Bearer KEY'] ADDRESS list
    grpc_call.py [-plaintext] ADDRESS describe brunix.AssistanceEngine
    grpc_call.py [-plaintext] [-H ...] -d '{"query": "..."}' ADDRESS brunix.AssistanceEngine/AskAgent

`list` and `describe` use server reflection; calls read the request as JSON (the proto's
field names) and print each response as JSON, one object per message, as grpcurl does.
The stubs are generated from proto/brunix.proto at run time (grpcio-tools), so nothing
generated is kept. Needs grpcio, grpcio-tools and grpcio-reflection (pinned in
tests/clients/requirements.txt; `./scripts/python-env.sh` prints a python that has them).
Over TLS (no -plaintext) the system's trust store is used, or the PEM file in -cacert.
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile

import grpc
from google.protobuf import json_format

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")


def stubs():
    """brunix_pb2 and brunix_pb2_grpc, generated into a temporary folder."""
    out = tempfile.mkdtemp(prefix="brunix-stubs-")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}",
         f"--python_out={out}", f"--grpc_python_out={out}",
         os.path.join(PROTO_DIR, "brunix.proto")],
        check=True,
    )
    sys.path.insert(0, out)
    return importlib.import_module("brunix_pb2"), importlib.import_module("brunix_pb2_grpc")


def channel(args):
    if args.plaintext:
        return grpc.insecure_channel(args.address)
    root = open(args.cacert, "rb").read() if args.cacert else None
    return grpc.secure_channel(args.address, grpc.ssl_channel_credentials(root))


def metadata(args):
    pairs = []
    for header in args.H:
        name, _, value = header.partition(":")
        pairs.append((name.strip().lower(), value.strip()))
    return pairs


def reflect(args):
    from google.protobuf.descriptor_pool import DescriptorPool
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    database = ProtoReflectionDescriptorDatabase(channel(args))
    if args.target == "list":
        for name in database.get_services():
            print(name)
        return
    service = DescriptorPool(database).FindServiceByName(args.name)
    print(f"{service.full_name} is a service:")
    for m in service.methods:
        stream = "stream " if m.server_streaming else ""
        print(f"  rpc {m.name} ( .{m.input_type.full_name} ) returns ( {stream}.{m.output_type.full_name} );")


def as_dict(message):
    """The message with the proto's field names and every field, defaults included."""
    try:
        return json_format.MessageToDict(
            message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    except TypeError:  # protobuf before 5.26
        return json_format.MessageToDict(
            message, preserving_proto_field_name=True, including_default_value_fields=True)


def call(args):
    pb2, pb2_grpc = stubs()
    service, _, method = args.target.rpartition("/")
    if service != "brunix.AssistanceEngine":
        sys.exit(f"unknown service {service!r}: this client knows brunix.AssistanceEngine")
    stub = pb2_grpc.AssistanceEngineStub(channel(args))
    rpc = getattr(stub, method, None)
    if rpc is None:
        sys.exit(f"unknown method {method!r}")
    request_type = {"AskAgent": pb2.AgentRequest, "AskAgentStream": pb2.AgentRequest,
                    "EvaluateRAG": pb2.EvalRequest}[method]
    request = json_format.Parse(args.d or "{}", request_type())
    try:
        answer = rpc(request, metadata=metadata(args))
        for message in ([answer] if method == "EvaluateRAG" else answer):
            print(json.dumps(as_dict(message), ensure_ascii=False, indent=2))
    except grpc.RpcError as e:
        sys.exit(f"ERROR:\n  Code: {e.code().name}\n  Message: {e.details()}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-plaintext", action="store_true", help="no TLS")
    p.add_argument("-cacert", help="PEM file of the CA that signed the gateway's certificate")
    p.add_argument("-H", action="append", default=[], help="metadata 'name: value'")
    p.add_argument("-d", help="the request as JSON")
    p.add_argument("address")
    p.add_argument("target", help="list | describe | SERVICE/METHOD")
    p.add_argument("name", nargs="?", help="the service to describe")
    args = p.parse_args()
    if args.target in ("list", "describe"):
        reflect(args)
    else:
        call(args)


if __name__ == "__main__":
    main()
