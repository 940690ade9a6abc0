"""A kubelet's pod-resources API for tests, served by grpcio (a real gRPC server).

    python3 tests/fake-kubelet/serve.py SOCKET NAMESPACE,POD,CONTAINER,RESOURCE,DEVICE_ID...

answers `/v1.PodResourcesLister/List` with one pod per NAMESPACE,POD, its containers and
devices as given, encoded by hand from the message's field numbers (k8s.io/kubelet
pkg/apis/podresources/v1 api.proto): no protobuf package needed. Prints `ready` once serving;
runs until killed.
"""

import sys
from concurrent import futures

import grpc


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def response(allocations):
    pods = {}
    for a in allocations:
        ns, pod, container, resource, device = a.split(",", 4)
        pods.setdefault((ns, pod), {}).setdefault(container, []).append((resource, device))
    out = b""
    for (ns, pod), containers in pods.items():
        body = field(1, pod.encode()) + field(2, ns.encode())
        for name, devices in containers.items():
            c = field(1, name.encode())
            for resource, device in devices:
                c += field(2, field(1, resource.encode()) + field(2, device.encode()))
            # cpu_ids (3), packed int64s: a field the exporter skips.
            c += field(3, varint(2) + varint(3))
            body += field(3, c)
        out += field(1, body)
    return out


def main():
    socket, allocations = sys.argv[1], sys.argv[2:]
    answer = response(allocations)
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {"List": grpc.unary_unary_rpc_method_handler(lambda request, context: answer)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("unix:" + socket)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
