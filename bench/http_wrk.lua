-- bench/http_wrk.lua: wrk script for bench/http.sh.
--   wrk -t2 -c64 -dSs -s bench/http_wrk.lua URL -- METHOD [BODY_FILE [CONTENT_TYPE]]
-- Sends the same request on every keep-alive connection: METHOD (GET or POST) with the bytes of
-- BODY_FILE as the body. At the end it prints one JSON line on stdout:
--   {"requests":N,"seconds":S,"rps":R,"p50_ms":..,"p90_ms":..,"p99_ms":..,"max_ms":..,
--    "errors":{"connect":..,"read":..,"write":..,"status":..,"timeout":..}}
-- "status" counts responses that were not 2xx/3xx.

local req

function init(args)
  local method = args[1] or "GET"
  local body, headers = nil, {}
  if args[2] and args[2] ~= "" then
    local f = assert(io.open(args[2], "rb"))
    body = f:read("*a")
    f:close()
    headers["Content-Type"] = args[3] or "application/octet-stream"
    headers["Content-Length"] = tostring(#body)
  end
  req = wrk.format(method, nil, headers, body)
end

function request()
  return req
end

function done(summary, latency, requests)
  local s = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"rps":%.1f,"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,' ..
    '"max_ms":%.3f,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, s, summary.requests / s,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3, e.connect, e.read, e.write, e.status, e.timeout))
end
