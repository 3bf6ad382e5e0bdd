-- Debian's nginx + lua-nginx-module, unpacked under build/debs by
-- scripts/fetch-debs.sh (never installed: they would replace the system
-- LuaJIT), running one content_by_lua_file location, for the specs that
-- compare tycho.ngx with OpenResty (spec/ngx_diff_spec.lua). As
-- bench/openresty/run.sh runs it: OpenResty's LuaJIT (libluajit2) through
-- LD_LIBRARY_PATH, lua-resty-core on the package path.
local H = require "support.helper"

local O = {}

local read = H.read

local PKGS = "nginx libnginx-mod-http-ndk libnginx-mod-http-lua libluajit2-5.1-2 "
  .. "lua-resty-core lua-resty-lrucache"

local CONF = [[
load_module %s/libnginx-mod-http-ndk/usr/lib/nginx/modules/ndk_http_module.so;
load_module %s/libnginx-mod-http-lua/usr/lib/nginx/modules/ngx_http_lua_module.so;
daemon off;
master_process off;
worker_processes 1;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  server_tokens off;
  default_type text/plain;
  client_body_temp_path %s/tmp;
  proxy_temp_path %s/tmp;
  fastcgi_temp_path %s/tmp;
  uwsgi_temp_path %s/tmp;
  scgi_temp_path %s/tmp;
  lua_package_path "%s;;";
  server {
    listen 127.0.0.1:%d;
    location / { content_by_lua_file %s; }
  }
}
]]

-- Starts nginx serving content_file for every path, with lua_path (a
-- package.path string) for its requires. Returns {port=, dir=} and a stop
-- function; nil, why when the packages cannot be had or nginx fails.
function O.start(content_file, lua_path)
  local rc, _, err = H.sh("scripts/fetch-debs.sh " .. PKGS)
  if rc ~= 0 then return nil, "scripts/fetch-debs.sh failed: " .. err end
  local debs = H.repo_root() .. "/build/debs"
  local bin = debs .. "/nginx/usr/sbin/nginx"
  local dir = os.tmpname()
  os.remove(dir)
  os.execute(("mkdir -p %s/tmp && chmod 755 %s"):format(H.quote(dir), H.quote(dir)))
  math.randomseed(os.time() + (tonumber(tostring({}):match("0x(%x+)"), 16) or 0) % 100000)
  for _ = 1, 10 do
    local port = 20000 + math.random(30000)
    local f = assert(io.open(dir .. "/nginx.conf", "wb"))
    f:write(CONF:format(debs, debs, dir, dir, dir, dir, dir, dir, dir, lua_path .. ";"
      .. debs .. "/lua-resty-core/usr/share/lua/5.1/?.lua;"
      .. debs .. "/lua-resty-lrucache/usr/share/lua/5.1/?.lua", port, content_file))
    f:close()
    local p = io.popen(("LD_LIBRARY_PATH=%s/libluajit2-5.1-2/usr/lib/x86_64-linux-gnu "
      .. "%s -p %s -c %s/nginx.conf -e %s/error.log >%s/out.log 2>&1 & echo $!")
      :format(H.quote(debs), H.quote(bin), H.quote(dir), H.quote(dir), H.quote(dir), H.quote(dir)))
    local pid = tonumber(p:read("*l"))
    p:close()
    for _ = 1, 100 do
      -- Ours, not another server on that port: it has written its pid file.
      local got = read(dir .. "/nginx.pid")
      local probe = "curl -s -o /dev/null --max-time 1 http://127.0.0.1:%d/"
      if got and tonumber(got) and H.sh(probe:format(port)) == 0 then
        local function stop()
          os.execute("kill " .. pid .. " 2>/dev/null; sleep 0.1")
          os.execute("rm -rf " .. H.quote(dir))
        end
        return { port = port, dir = dir, log = function() return read(dir .. "/error.log") end },
          stop
      end
      if os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= 0 then break end
      os.execute("sleep 0.05")
    end
    os.execute("kill " .. pid .. " 2>/dev/null")
    -- Another port only when this one was taken.
    if not (read(dir .. "/error.log") or ""):find("in use", 1, true) then break end
  end
  local why = ((read(dir .. "/error.log") or "") .. (read(dir .. "/out.log") or ""))
    :match("([^\n]+)\n?$") or "no log"  -- its last line says why
  os.execute("rm -rf " .. H.quote(dir))
  return nil, "nginx did not start: " .. why
end

return O
