"""A tiny Qdrant gRPC server for the integration tests only.

No Qdrant server binary is available where the tests run, so this script puts
the *real* Qdrant gRPC API (the generated servicers from the PyPI package
``qdrant-client``) in front of that package's in-memory local mode
(``QdrantClient(":memory:")``).  Requests are converted gRPC -> REST models with
``GrpcToRest``, executed by the local engine (exact brute-force search), and
the results converted back with ``RestToGrpc``.

It is NOT a Qdrant replacement: it implements only the RPCs the tests use
(HealthCheck; collections Create/Get/List/Delete/CollectionExists; points
Upsert/Delete/Get/Scroll/Search/Query/Count/CreateFieldIndex/DeleteFieldIndex).
Every other RPC answers UNIMPLEMENTED.  Data lives in memory and is lost on exit.

Requires: pip install qdrant-client==1.20.0 grpcio==1.85.1

Usage: python tests/qdrant_grpc_server.py PORT   (PORT 0 picks a free port)
Binds 127.0.0.1, prints ``LISTENING <port>`` once ready, serves until
SIGTERM/SIGINT.
"""

import functools
import re
import signal
import sys
import threading
import time
import warnings
from concurrent import futures

import grpc
from qdrant_client import QdrantClient
from qdrant_client import grpc as pb
from qdrant_client.conversions.conversion import (
    GrpcToRest,
    RestToGrpc,
    grpc_field_type_to_payload_schema,
)
from qdrant_client.http import models as rest

QDRANT_TITLE = "qdrant - vector search engine"
QDRANT_VERSION = "1.20.0"

warnings.filterwarnings("ignore")  # local mode warns that payload indexes are no-ops

_db = QdrantClient(":memory:")
_lock = threading.Lock()  # local mode is not thread-safe
_indexes = {}  # collection -> {field: PayloadSchemaInfo}, reported by Get


def rpc(method):
    """Serialize access to the store, fill `time`, map exceptions to gRPC status codes."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        start = time.perf_counter()
        try:
            with _lock:
                response = method(self, request)
            response.time = time.perf_counter() - start
            return response
        except Exception as exc:  # noqa: BLE001 - every error becomes a gRPC status
            msg = str(exc) or type(exc).__name__
            if re.match(r"Collection .* not found", msg):
                code = grpc.StatusCode.NOT_FOUND
            elif "already exists" in msg:
                code = grpc.StatusCode.ALREADY_EXISTS
            elif isinstance(exc, (ValueError, TypeError, KeyError, AssertionError)):
                code = grpc.StatusCode.INVALID_ARGUMENT  # pydantic errors are ValueErrors
            else:
                code = grpc.StatusCode.INTERNAL
            context.abort(code, msg)

    return wrapper


def _opt(request, field, convert=None):
    """Value of an optional/message field, converted, or None when unset."""
    if not request.HasField(field):
        return None
    value = getattr(request, field)
    return convert(value) if convert else value


def _filter(request, field="filter"):
    return _opt(request, field, GrpcToRest.convert_filter)


def _with_payload(request):
    return _opt(request, "with_payload", GrpcToRest.convert_with_payload_selector) or False


def _with_vectors(request):
    return _opt(request, "with_vectors", GrpcToRest.convert_with_vectors_selector) or False


def _retrieved(record):
    """A stored point for gRPC: read without its payload, the local engine leaves it None,
    which the converter cannot take (a server answers an empty payload)."""
    if record.payload is None:
        record = record.model_copy(update={"payload": {}})
    return RestToGrpc.convert_retrieved_point(record)


def _update_result(result=None):
    result = result or rest.UpdateResult(operation_id=0, status=rest.UpdateStatus.COMPLETED)
    return RestToGrpc.convert_update_result(result)


class QdrantService(pb.QdrantServicer):
    def HealthCheck(self, request, context):
        return pb.HealthCheckReply(title=QDRANT_TITLE, version=QDRANT_VERSION)


class CollectionsService(pb.CollectionsServicer):
    @rpc
    def Create(self, request):
        vectors = _opt(request, "vectors_config", GrpcToRest.convert_vectors_config)
        sparse = _opt(request, "sparse_vectors_config", GrpcToRest.convert_sparse_vector_config)
        metadata = GrpcToRest.convert_payload(request.metadata) if request.metadata else None
        ok = _db.create_collection(
            request.collection_name,
            vectors_config=vectors,
            sparse_vectors_config=sparse,
            metadata=metadata,
        )
        _indexes[request.collection_name] = {}
        return pb.CollectionOperationResponse(result=ok)

    @rpc
    def Get(self, request):
        info = RestToGrpc.convert_collection_info(_db.get_collection(request.collection_name))
        for field, schema in _indexes.get(request.collection_name, {}).items():
            info.payload_schema[field].CopyFrom(schema)
            info.payload_schema[field].points = info.points_count
        return pb.GetCollectionInfoResponse(result=info)

    @rpc
    def List(self, request):
        names = [c.name for c in _db.get_collections().collections]
        return pb.ListCollectionsResponse(
            collections=[pb.CollectionDescription(name=n) for n in names]
        )

    @rpc
    def Delete(self, request):
        _indexes.pop(request.collection_name, None)
        ok = _db.delete_collection(request.collection_name)
        return pb.CollectionOperationResponse(result=ok)

    @rpc
    def CollectionExists(self, request):
        exists = _db.collection_exists(request.collection_name)
        return pb.CollectionExistsResponse(result=pb.CollectionExists(exists=exists))


class PointsService(pb.PointsServicer):
    @rpc
    def Upsert(self, request):
        points = [GrpcToRest.convert_point_struct(p) for p in request.points]
        result = _db.upsert(
            request.collection_name,
            points=points,
            update_filter=_filter(request, "update_filter"),
        )
        return pb.PointsOperationResponse(result=_update_result(result))

    @rpc
    def Delete(self, request):
        if not request.HasField("points"):
            raise ValueError("points selector is required")
        selector = GrpcToRest.convert_points_selector(request.points)
        result = _db.delete(request.collection_name, points_selector=selector)
        return pb.PointsOperationResponse(result=_update_result(result))

    @rpc
    def Get(self, request):
        records = _db.retrieve(
            request.collection_name,
            ids=[GrpcToRest.convert_point_id(i) for i in request.ids],
            with_payload=_with_payload(request),
            with_vectors=_with_vectors(request),
        )
        return pb.GetResponse(result=[_retrieved(r) for r in records])

    @rpc
    def Scroll(self, request):
        records, next_offset = _db.scroll(
            request.collection_name,
            scroll_filter=_filter(request),
            limit=request.limit if request.HasField("limit") else 10,
            offset=_opt(request, "offset", GrpcToRest.convert_point_id),
            with_payload=_with_payload(request),
            with_vectors=_with_vectors(request),
        )
        return pb.ScrollResponse(
            result=[_retrieved(r) for r in records],
            next_page_offset=(
                RestToGrpc.convert_extended_point_id(next_offset)
                if next_offset is not None
                else None
            ),
        )

    @rpc
    def Search(self, request):
        vector = list(request.vector)
        if request.HasField("sparse_indices"):
            vector = rest.SparseVector(indices=list(request.sparse_indices.data), values=vector)
        response = _db.query_points(
            request.collection_name,
            query=rest.NearestQuery(nearest=vector),
            using=_opt(request, "vector_name"),
            query_filter=_filter(request),
            limit=request.limit,
            offset=_opt(request, "offset"),
            score_threshold=_opt(request, "score_threshold"),
            with_payload=_with_payload(request),
            with_vectors=_with_vectors(request),
        )
        return pb.SearchResponse(
            result=[RestToGrpc.convert_scored_point(p) for p in response.points]
        )

    @rpc
    def Query(self, request):
        prefetch = [GrpcToRest.convert_prefetch_query(p) for p in request.prefetch]
        response = _db.query_points(
            request.collection_name,
            query=_opt(request, "query", GrpcToRest.convert_query),
            using=_opt(request, "using"),
            prefetch=prefetch or None,
            query_filter=_filter(request),
            limit=request.limit if request.HasField("limit") else 10,
            offset=_opt(request, "offset"),
            score_threshold=_opt(request, "score_threshold"),
            with_payload=_with_payload(request),
            with_vectors=_with_vectors(request),
            lookup_from=_opt(request, "lookup_from", GrpcToRest.convert_lookup_location),
        )
        return pb.QueryResponse(
            result=[RestToGrpc.convert_scored_point(p) for p in response.points]
        )

    @rpc
    def Count(self, request):
        result = _db.count(request.collection_name, count_filter=_filter(request), exact=True)
        return pb.CountResponse(result=RestToGrpc.convert_count_result(result))

    @rpc
    def CreateFieldIndex(self, request):
        if not request.HasField("field_type"):
            raise ValueError("field_type is required")
        data_type = grpc_field_type_to_payload_schema(request.field_type)
        if request.HasField("field_index_params"):
            schema = GrpcToRest.convert_payload_schema_params(request.field_index_params)
        else:
            schema = GrpcToRest.convert_payload_schema_type(data_type)
        result = _db.create_payload_index(
            request.collection_name, field_name=request.field_name, field_schema=schema
        )
        # local mode keeps no payload index info, remember it so Get can report it
        info = pb.PayloadSchemaInfo(data_type=data_type)
        if request.HasField("field_index_params"):
            info.params.CopyFrom(request.field_index_params)
        _indexes.setdefault(request.collection_name, {})[request.field_name] = info
        return pb.PointsOperationResponse(result=_update_result(result))

    @rpc
    def DeleteFieldIndex(self, request):
        result = _db.delete_payload_index(request.collection_name, request.field_name)
        _indexes.get(request.collection_name, {}).pop(request.field_name, None)
        return pb.PointsOperationResponse(result=_update_result(result))


def main():
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} PORT")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        options=[("grpc.so_reuseport", 0)],  # a busy port must fail, not be shared
    )
    pb.add_QdrantServicer_to_server(QdrantService(), server)
    pb.add_CollectionsServicer_to_server(CollectionsService(), server)
    pb.add_PointsServicer_to_server(PointsService(), server)
    try:
        port = server.add_insecure_port(f"127.0.0.1:{int(sys.argv[1])}")
    except RuntimeError as exc:  # e.g. the port is already in use
        sys.exit(f"qdrant_grpc_server: {exc}")
    server.start()

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"LISTENING {port}", flush=True)
    stop.wait()
    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
