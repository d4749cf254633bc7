"""Flow control: rate limits (``limiter.RateLimiter``, GCRA) and concurrency keys (``limiter.ConcurrencySlots``) held
across every worker on the state table, applied by the ``control.FlowControl`` middleware (docs/flow-control.md)."""
