-- A network namespace joined to this one by a veth pair, for the partition
-- specs (spec/cluster_partition_spec.lua): a process started with
-- `ip netns exec <ns>` (NS.prefix) reaches the host side's address only over
-- the pair, so setting the namespace's end down cuts exactly that process
-- off (its TCP connections stay open, as across a real network cut), and
-- setting it up heals the link. Made and removed by the spec; needs root
-- (CAP_NET_ADMIN) and iproute2: NS.unavailable() says why not.
local H = require "support.helper"

local NS = {}

local function run(cmd)
  local rc, out, err = H.sh(cmd)
  return rc == 0, (out or "") .. (err or "")
end

local function tag()
  local f = io.open("/proc/self/stat")
  local me = f:read("*l"):match("^(%d+)")
  f:close()
  return me
end

-- nil when namespaces can be made here, else the reason.
function NS.unavailable()
  if not run("command -v ip") then return "no ip command (iproute2)" end
  local name = "tyck" .. tag()
  local ok, out = run("ip netns add " .. name)
  if not ok then
    return "cannot make a network namespace (ip netns add: " .. out:gsub("%s+$", "") .. ")"
  end
  run("ip netns del " .. name)
  return nil
end

-- A namespace and its veth pair on 10.(200 + k % 50).(pid % 250).0/30;
-- returns {name=, host=, inside=, prefix=}. Interface names stay under
-- the kernel's 15 bytes.
function NS.make(k)
  local me = tonumber(tag())
  local name = ("ty%d_%d"):format(me % 100000, k)
  local net = ("10.%d.%d"):format(200 + (me + k) % 50, me % 250)
  local ns = { name = name, host = net .. ".1", inside = net .. ".2",
    hveth = "th" .. me % 100000 .. k, nveth = "tn" .. me % 100000 .. k }
  ns.prefix = "ip netns exec " .. name
  local steps = {
    "ip netns add " .. name,
    ("ip link add %s type veth peer name %s"):format(ns.hveth, ns.nveth),
    ("ip link set %s netns %s"):format(ns.nveth, name),
    ("ip addr add %s/30 dev %s"):format(ns.host, ns.hveth),
    ("ip link set %s up"):format(ns.hveth),
    ("%s ip addr add %s/30 dev %s"):format(ns.prefix, ns.inside, ns.nveth),
    ("%s ip link set %s up"):format(ns.prefix, ns.nveth),
    ns.prefix .. " ip link set lo up",
  }
  for _, cmd in ipairs(steps) do
    local ok, out = run(cmd)
    if not ok then
      NS.remove(ns)
      error("netns: " .. cmd .. ": " .. out)
    end
  end
  return ns
end

-- The namespace's end of the link down (cut) or up (heal).
function NS.cut(ns)
  assert(run(("%s ip link set %s down"):format(ns.prefix, ns.nveth)))
end

function NS.heal(ns)
  assert(run(("%s ip link set %s up"):format(ns.prefix, ns.nveth)))
end

-- Removes both (deleting the namespace deletes its end of the pair, and
-- the pair with it).
function NS.remove(ns)
  run("ip netns del " .. ns.name)
  run("ip link del " .. ns.hveth .. " 2>/dev/null")
end

return NS
