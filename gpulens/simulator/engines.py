"""What the serving engines of simulated pods export on their own /metrics, from the same requests their
GPUs serve (workloads.engine_load), with each engine's names, types and labels:

- vLLM (docs.vllm.ai, "Production Metrics"): gauges `vllm:num_requests_running`, `vllm:num_requests_waiting`,
  `vllm:kv_cache_usage_perc` (0-1; before V1 `vllm:gpu_cache_usage_perc`), counters
  `vllm:request_success_total{finished_reason}`, `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
  each labelled with `model_name`.
- Triton Inference Server (its user guide, "Metrics"): counters `nv_inference_request_success`,
  `nv_inference_count`, `nv_inference_exec_count`, `nv_inference_request_duration_us`,
  `nv_inference_queue_duration_us` and the gauge `nv_inference_pending_request_count`, each labelled with
  `model` and `version`.
"""

from __future__ import annotations

from gpulens.simulator.workloads import EngineLoad

#: The engines the simulator plays, by the name a fleet file gives (`engine:`).
ENGINES = ("vllm", "triton")


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{text}}} {value:.17g}"


def vllm_text(load: EngineLoad, model_name: str) -> str:
    model = {"model_name": model_name}
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        _sample("vllm:num_requests_running", model, load.running),
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        _sample("vllm:num_requests_waiting", model, load.waiting),
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        _sample("vllm:kv_cache_usage_perc", model, round(load.kv_cache_usage, 4)),
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        _sample("vllm:request_success_total", {"finished_reason": "stop", **model}, int(load.requests)),
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter",
        _sample("vllm:prompt_tokens_total", model, int(load.prompt_tokens)),
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter",
        _sample("vllm:generation_tokens_total", model, int(load.output_tokens)),
    ]
    return "\n".join(lines) + "\n"


def triton_text(load: EngineLoad, model_name: str) -> str:
    model = {"model": model_name, "version": "1"}
    requests = int(load.requests)
    counters = (
        ("nv_inference_request_success", "Number of successful inference requests, all batch sizes", requests),
        ("nv_inference_count", "Number of inferences performed (does not include cached requests)", requests),
        (
            "nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            requests,
        ),
        (
            "nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds (includes cached requests)",
            int(load.requests * load.request_seconds * 1e6),
        ),
        (
            "nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds (includes cached requests)",
            requests * 50,
        ),
    )
    lines = []
    for name, help_text, value in counters:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", _sample(name, model, value)]
    lines += [
        "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution "
        "per-model.",
        "# TYPE nv_inference_pending_request_count gauge",
        _sample("nv_inference_pending_request_count", model, load.waiting),
    ]
    return "\n".join(lines) + "\n"


def engine_text(engine: str, load: EngineLoad, model_name: str) -> str:
    """`engine`'s exposition of `load` (ENGINES)."""
    return vllm_text(load, model_name) if engine == "vllm" else triton_text(load, model_name)
