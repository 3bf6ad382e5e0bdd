--- tycho.fs: whole-file reads and writes that never stall a worker.
--
--   tycho.fs.read(path)        -> data | nil, err
--   tycho.fs.write(path, data) -> true | nil, err   (creates or truncates)
--
-- Each call runs on the blocking pool (tycho.blocking "tycho.fs._read"): a
-- pool thread does the open/read/close while the calling actor waits and its
-- worker runs other actors. Errors are io.open's ("path: No such file or
-- directory"), or "busy" when the pool's queue is full. The data travels as
-- a message, so a file is limited to tycho.config's max_message (64 MiB by
-- default).
--
-- Why not io_uring: whole-file reads and writes need open + fstat + read
-- loop + close, and buffered file I/O on io_uring is itself punted to kernel
-- worker threads; one pool job for the whole sequence is as cheap and works
-- on every kernel and with the epoll backend too.
local tycho = require "tycho"

local fs = {}

local function check_path(fname, path)
  if type(path) ~= "string" or path == "" then
    error(("tycho.fs.%s: bad argument #1 (expected a path, got %s)")
      :format(fname, path == "" and "an empty string" or type(path)), 3)
  end
end

-- On a pool thread: the body of fs.read.
function fs._read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local data, rerr = f:read("*a")
  f:close()
  if not data then return nil, path .. ": " .. tostring(rerr) end
  return data
end

-- On a pool thread: the body of fs.write.
function fs._write(path, data)
  local f, err = io.open(path, "wb")
  if not f then return nil, err end
  local ok, werr = f:write(data)
  local closed, cerr = f:close()
  if not ok then return nil, path .. ": " .. tostring(werr) end
  if not closed then return nil, path .. ": " .. tostring(cerr) end
  return true
end

function fs.read(path)
  check_path("read", path)
  return tycho.blocking("tycho.fs._read", path)
end

function fs.write(path, data)
  check_path("write", path)
  if type(data) ~= "string" then
    error(("tycho.fs.write: bad argument #2 (expected a string, got %s)")
      :format(type(data)), 2)
  end
  return tycho.blocking("tycho.fs._write", path, data)
end

return fs
