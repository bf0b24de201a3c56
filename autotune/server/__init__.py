"""One vLLM server: flags -> argv, what the installed vLLM accepts, its process group, /metrics.

    command    flags <-> `vllm serve` argv (pure)
    vllm_help  the installed vLLM's version and `vllm serve --help=all`, parsed and cached
    refusals   configs vLLM refuses in its argument validation, recognised without a boot
    process    process groups owned by context managers, ports
    lifecycle  boot a server, wait for readiness, stop its group; boot timings
    bootlog    a boot's phases in vLLM's log (weights, torch.compile, CUDA graphs, ...)
    scrape     vLLM's Prometheus /metrics, sampled during a run
"""
