"""Serving latency: per-request timelines, metrics, load generation and A/B comparison.

``requests``  the one per-request record type (and its JSON / Arrow forms)
``record``    in-engine request timelines on the recorder's clock (``pytimings.request``)
``metrics``   TTFT, TPOT, ITL, E2E, throughput, goodput (``pytimings.serving_metrics``)
``loadgen``   ``pytimings loadgen``: drive an OpenAI-compatible streaming server
``runfile``   the load generator's JSON format, ``pytimings.serving/2``
``compare``   ``pytimings compare``: bootstrap intervals, verdicts, concurrency sweep, pooling
``join``      ``pytimings join``: client and engine per request, client TTFT by part
``cost``      USD per million output tokens from throughput and the GPU price
``trend``     drift over soak intervals: Mann-Kendall with Sen's slope
"""
