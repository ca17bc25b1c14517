"""The response cache (Triton's ``response_cache { enable: true }`` with ``--cache-config
local,size=N``): identical requests answered without running the model.

``key`` says which requests are the same (and which cannot be cached at all), ``store`` is the
keyed store with its policy (least recently used out, bounded by bytes), ``entry`` one cached
response, ``response_cache`` puts them on the request path with Triton's statistics.
"""
