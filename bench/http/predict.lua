-- predict.lua - wrk script for bench/http: POST /v1/predict with the body in $BENCH_BODY, and the server's
-- own timing of each answer (timing.queue_ms / inference_ms / total_ms) summed so done() can split the
-- client latency into queue wait, engine, and what is left (HTTP, JSON, tokenization, loopback).
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"

local threads = {}
function setup(thread) table.insert(threads, thread) end

function init(args) n, q, inf, tot, bad = 0, 0, 0, 0, 0 end

function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 return end
  local qm = tonumber(body:match('"queue_ms":([%d%.eE+-]+)'))
  local im = tonumber(body:match('"inference_ms":([%d%.eE+-]+)'))
  local tm = tonumber(body:match('"total_ms":([%d%.eE+-]+)'))
  if qm and im and tm then n, q, inf, tot = n + 1, q + qm, inf + im, tot + tm end
end

function done(summary, latency, requests)
  local N, Q, I, T, B = 0, 0, 0, 0, 0
  for _, t in ipairs(threads) do
    N, Q, I, T, B = N + t:get("n"), Q + t:get("q"), I + t:get("inf"), T + t:get("tot"), B + t:get("bad")
  end
  local errs = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format('BENCH {"requests":%d,"seconds":%.3f,"rps":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,"mean_ms":%.3f,' ..
    '"non200":%d,"socket_errors":%d,"server_n":%d,"queue_ms":%.3f,"inference_ms":%.3f,"server_total_ms":%.3f}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1e3, latency:percentile(99) / 1e3, latency.mean / 1e3, B, errs, N,
    N > 0 and Q / N or 0, N > 0 and I / N or 0, N > 0 and T / N or 0))
end
