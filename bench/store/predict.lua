-- wrk: POST /v1/predict for one task (STORE_TASK, default t0000), one short input.
local task = os.getenv("STORE_TASK") or "t0000"
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":"the service answered quickly and the staff were friendly","tasks":["' .. task .. '"]}'
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d errors=%d p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f rps=%.1f\n", summary.requests,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency:percentile(99.9) / 1000, summary.requests / (summary.duration / 1e6)))
end
