-- pool.lua - a worker pool: K actors serve requests made with tycho.call.
--
--   tycho examples/pool.lua [K] [LIMIT]      (default K = 4, LIMIT = 2000000)
--
-- The job: count the primes below LIMIT, cut into chunks. Main spawns K
-- workers, then runs K client coroutines (tycho.fork, siblings inside the
-- main actor, so they share its job list). Each client takes the next chunk,
-- calls its worker with it and adds the answer to the total; when the list
-- is empty it tells main. Workers are spread over the runtime's threads, so
-- the chunks are counted in parallel.
local tycho = require "tycho"

local K = tonumber(arg and arg[1]) or 4
local LIMIT = tonumber(arg and arg[2]) or 2000000
local CHUNK = 50000

-- A pool worker: answers ("primes", lo, hi) with the number of primes in
-- [lo, hi), and ("stop") with how many jobs it served, then ends.
local function worker(id)
  local function is_prime(n)
    if n < 2 then return false end
    if n % 2 == 0 then return n == 2 end
    for d = 3, math.floor(math.sqrt(n)), 2 do
      if n % d == 0 then return false end
    end
    return true
  end
  local served = 0
  while true do
    local op, lo, hi = tycho.recv()
    if op == "primes" then
      local c = 0
      for n = lo, hi - 1 do
        if is_prime(n) then c = c + 1 end
      end
      served = served + 1
      tycho.reply(c)
    elseif op == "stop" then
      tycho.reply(id, served)
      return
    else
      tycho.reply(nil, "unknown request " .. tostring(op))
    end
  end
end

local workers = {}
for i = 1, K do workers[i] = tycho.spawn(worker, i) end

-- The job list, shared by the client coroutines of this actor.
local jobs = {}
for lo = 0, LIMIT - 1, CHUNK do jobs[#jobs + 1] = { lo, math.min(lo + CHUNK, LIMIT) } end
local njobs, next_job, total = #jobs, 1, 0

local me = tycho.self()
local t0 = tycho.now()
for i = 1, K do
  tycho.fork(function()
    while next_job <= njobs do
      local job = jobs[next_job]
      next_job = next_job + 1
      local count, err = tycho.call_timeout(30, workers[i], "primes", job[1], job[2])
      if not count then error(("pool: worker %d failed: %s"):format(i, tostring(err))) end
      total = total + count
    end
    tycho.send(me, "client done", i)
  end)
end

for _ = 1, K do
  local tag = tycho.recv(60)
  assert(tag == "client done", "pool: a client did not finish: " .. tostring(tag))
end
local dt = tycho.now() - t0

local per = {}
for i = 1, K do
  local id, served = tycho.call(workers[i], "stop")
  per[#per + 1] = ("w%d=%d"):format(id, served)
end

print(("pool: %d workers, %d jobs, %d primes below %d in %.3f s (jobs per worker: %s)")
  :format(K, njobs, total, LIMIT, dt, table.concat(per, " ")))
if LIMIT == 2000000 then
  assert(total == 148933, "pool: wrong prime count " .. total)
end
