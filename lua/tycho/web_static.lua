-- tycho.web_static - app:static(prefix, dir, opts) of tycho.web: the files
-- under dir, answered to GET and HEAD of prefix/...
--
-- The file's bytes go from the page cache to the socket by sendfile(2)
-- (core/net/lhttp_file.c), never through Lua while the socket takes them.
-- ETag ("mtime-size", hex) and Last-Modified; If-None-Match and
-- If-Modified-Since answer 304; a single Range "bytes=a-b" | "a-" | "-n"
-- answers 206 (If-Range honoured; several ranges: the whole file, 200), one
-- past the end 416. Content-Type from the extension (opts.types adds or
-- overrides: {ext = type}); opts.max_age gives Cache-Control: max-age;
-- opts.index ("index.html"; false: none) answers a path ending in "/".
--
-- Never outside dir: a path with "..", "." or an empty segment, an encoded
-- slash or backslash (%2F, %5C), a NUL, or a file whose real path (symlinks
-- resolved) is not under dir's real path is a 404, as a missing file is.
local core = require "tycho.core"

local hc = core._http
local M = {}

local TYPES = {
  html = "text/html; charset=utf-8", htm = "text/html; charset=utf-8",
  css = "text/css; charset=utf-8", js = "text/javascript; charset=utf-8",
  mjs = "text/javascript; charset=utf-8", json = "application/json",
  txt = "text/plain; charset=utf-8", md = "text/markdown; charset=utf-8",
  csv = "text/csv; charset=utf-8", xml = "application/xml", svg = "image/svg+xml",
  png = "image/png", jpg = "image/jpeg", jpeg = "image/jpeg", gif = "image/gif",
  webp = "image/webp", avif = "image/avif", ico = "image/x-icon", wasm = "application/wasm",
  pdf = "application/pdf", woff = "font/woff", woff2 = "font/woff2", ttf = "font/ttf",
  otf = "font/otf", mp4 = "video/mp4", webm = "video/webm", mp3 = "audio/mpeg",
  ogg = "audio/ogg", wav = "audio/wav", zip = "application/zip", gz = "application/gzip",
  tar = "application/x-tar", map = "application/json",
}

--- Validates app:static's arguments; the route's plain data.
function M.check(prefix, dir, opts)
  if type(prefix) ~= "string" or prefix:sub(1, 1) ~= "/" then
    error("tycho.web: app:static's prefix must be a path starting with '/'", 3)
  end
  if type(dir) ~= "string" then error("tycho.web: app:static's dir must be a string", 3) end
  opts = opts or {}
  if type(opts) ~= "table" then error("tycho.web: app:static's opts must be a table", 3) end
  local root = hc.realpath(dir)
  if not root then error("tycho.web: app:static: no folder " .. dir, 3) end
  local max_age = opts.max_age
  if max_age ~= nil and (type(max_age) ~= "number" or max_age < 0) then
    error("tycho.web: app:static's max_age must be seconds >= 0", 3)
  end
  local types = {}
  for k, v in pairs(opts.types or {}) do types[tostring(k):lower()] = tostring(v) end
  local index = opts.index
  if index == nil then index = "index.html" end
  prefix = prefix:gsub("/+$", "")
  return { pattern = prefix .. "/*path", root = root, max_age = max_age, types = types,
    index = index, skip = #prefix + 1 }
end

-- ---- dates ----------------------------------------------------------------------

local function http_date(t) return os.date("!%a, %d %b %Y %H:%M:%S GMT", t) end

local MONTHS = { Jan = 1, Feb = 2, Mar = 3, Apr = 4, May = 5, Jun = 6, Jul = 7, Aug = 8,
  Sep = 9, Oct = 10, Nov = 11, Dec = 12 }

-- Days since 1970-01-01 of a civil date (H. Hinnant's algorithm).
local function days(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- An IMF-fixdate -> seconds since the epoch, or nil.
local function parse_date(s)
  local d, mon, y, h, mi, sec =
    s:match("^%a+, (%d%d) (%a%a%a) (%d%d%d%d) (%d%d):(%d%d):(%d%d) GMT$")
  local m = MONTHS[mon or ""]
  if not m then return nil end
  return days(tonumber(y), m, tonumber(d)) * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60
    + tonumber(sec)
end

-- ---- ranges ----------------------------------------------------------------------

-- "bytes=a-b" -> off, len; nil: serve the whole file; false: 416.
local function range(h, size)
  local spec = h:match("^%s*bytes%s*=%s*(.-)%s*$")
  if not spec or spec:find(",", 1, true) then return nil end
  local a, b = spec:match("^(%d*)%-(%d*)$")
  if not a or (a == "" and b == "") then return nil end
  if a == "" then -- the last b bytes
    local n = tonumber(b)
    if n == 0 or size == 0 then return false end
    if n > size then n = size end
    return size - n, n
  end
  local first = tonumber(a)
  if first >= size then return false end
  local last = b == "" and size - 1 or math.min(tonumber(b), size - 1)
  if last < first then return nil end
  return first, last - first + 1
end

-- ---- the route --------------------------------------------------------------------

local function not_found()
  return { status = 404, headers = { ["Content-Type"] = "text/plain" }, body = "Not Found\n" }
end

-- HEAD sends the length only: its descriptor goes now (a closed file
-- still gives the response its length).
local function file_response(req, status, h, f)
  if req.method == "HEAD" then hc.file_close(f) end
  return { status = status, headers = h, body = f }
end

function M.handler(req, route)
  local d = route.data
  local raw = req.path:sub(d.skip + 1)
  if raw:find("%%2[Ff]") or raw:find("%%5[Cc]") or raw:find("%%00") then return not_found() end
  local rel = req.params.path
  if rel:find("%z") or rel:find("\\", 1, true) then return not_found() end
  if rel == "" or rel:sub(-1) == "/" then
    if not d.index then return not_found() end
    rel = rel .. d.index
  end
  for seg in (rel .. "/"):gmatch("([^/]*)/") do
    if seg == "" or seg == "." or seg == ".." then return not_found() end
  end
  local f, size, mtime = hc.file_open(d.root .. "/" .. rel, d.root)
  if not f then return not_found() end
  local etag = ('"%x-%x"'):format(mtime, size)
  local lm = http_date(mtime)
  local ext = rel:match("%.([^./]+)$")
  ext = ext and ext:lower()
  local h = { ETag = etag, ["Last-Modified"] = lm, ["Accept-Ranges"] = "bytes",
    ["Content-Type"] = ext and (d.types[ext] or TYPES[ext]) or "application/octet-stream" }
  if d.max_age then h["Cache-Control"] = "max-age=" .. math.floor(d.max_age) end
  local hd = req.headers
  local inm, ims = hd["if-none-match"], hd["if-modified-since"]
  local fresh
  if inm then
    fresh = inm == "*"
    for tag in inm:gmatch("[^,%s]+") do
      if tag == etag or tag == "W/" .. etag then fresh = true end
    end
  elseif ims then
    local t = parse_date(ims)
    fresh = t ~= nil and mtime <= t
  end
  if fresh then
    hc.file_close(f)
    h["Content-Type"] = nil
    return { status = 304, headers = h }
  end
  local rh, ir = hd.range, hd["if-range"]
  if rh and (not ir or ir == etag or ir == lm) then
    local off, len = range(rh, size)
    if off == false then
      hc.file_close(f)
      h["Content-Range"] = "bytes */" .. size
      h["Content-Type"] = "text/plain"
      return { status = 416, headers = h, body = "Range Not Satisfiable\n" }
    elseif off then
      hc.file_range(f, off, len)
      h["Content-Range"] = ("bytes %d-%d/%d"):format(off, off + len - 1, size)
      return file_response(req, 206, h, f)
    end
  end
  return file_response(req, 200, h, f)
end

return M
