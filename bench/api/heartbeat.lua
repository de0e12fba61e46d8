-- wrk script: heartbeats of simulated nodes bn-0 .. bn-(N-1) registered by setup_nodes.py.
-- Environment: BENCH_TOKEN (agent token), BENCH_NODES (default 1000), BENCH_THREADS (wrk -t),
-- BENCH_DELAY_MS (pause of each connection before each request: C connections with a pause
-- of P ms make about C * 1000 / (P + latency) beats a second; 0 = as fast as possible).
local nodes = tonumber(os.getenv("BENCH_NODES") or "1000")
local pause = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
local token = os.getenv("BENCH_TOKEN") or ""
local nthreads = tonumber(os.getenv("BENCH_THREADS") or "1")
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

-- Thread t walks the nodes in order starting at t * N / threads, so together the threads
-- spread their beats over all nodes.
function init(args)
  counter = math.floor((tid or 0) * nodes / nthreads)
  headers = {["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json"}
end

function request()
  local i = counter % nodes
  counter = counter + 1
  local body = '{"incarnation":"inc-' .. i .. '","version":0,"wait_ms":0,"workers":[]}'
  return wrk.format("POST", "/v1/nodes/bn-" .. i .. ":heartbeat", headers, body)
end

if pause > 0 then
  function delay()
    return pause
  end
end
