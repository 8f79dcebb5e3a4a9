"""A fake kubelet: a real gRPC server of v1.PodResourcesLister on a unix socket.

It serves a pod list the test scripts and changes while the exporter runs, and can be made slow.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from tests import podresources_pb2 as pb
from tests import podresources_pb2_grpc as pb_grpc

# {(namespace, pod): {container: [(resource name, [device ids])]}}
Pods = dict[tuple[str, str], dict[str, list[tuple[str, list[str]]]]]


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    def __init__(self, socket_path: str, pods: Pods | None = None):
        self.socket_path = socket_path
        self.pods: Pods = pods or {}
        self.delay_seconds = 0.0
        #: (grpc.StatusCode, details) that List answers with instead of the pods, when set.
        self.failure: tuple[grpc.StatusCode, str] | None = None
        self.list_calls = 0
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None

    def set_pods(self, pods: Pods) -> None:
        with self._lock:
            self.pods = pods

    def _pod_resources(self, key) -> pb.PodResources:
        namespace, name = key
        return pb.PodResources(
            name=name,
            namespace=namespace,
            containers=[
                pb.ContainerResources(
                    name=container,
                    devices=[pb.ContainerDevices(resource_name=resource, device_ids=ids) for resource, ids in devices],
                )
                for container, devices in self.pods[key].items()
            ],
        )

    def List(self, request, context):
        self.list_calls += 1
        if self.delay_seconds:
            time.sleep(self.delay_seconds)
        if self.failure is not None:
            context.abort(*self.failure)
        with self._lock:
            return pb.ListPodResourcesResponse(pod_resources=[self._pod_resources(k) for k in self.pods])

    def Get(self, request, context):
        with self._lock:
            key = (request.pod_namespace, request.pod_name)
            if key not in self.pods:
                context.abort(grpc.StatusCode.NOT_FOUND, f"pod {key} not found")
            return pb.GetPodResourcesResponse(pod_resources=self._pod_resources(key))

    def GetAllocatableResources(self, request, context):
        return pb.AllocatableResourcesResponse()

    def start(self) -> FakeKubelet:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix:{self.socket_path}")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None
