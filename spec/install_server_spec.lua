-- install_server_spec.lua - `luarocks install tycho --server=` the folder
-- `make rock` wrote, on a machine that has only that folder (the cases:
-- spec/support/release_rock.lua; the src rock: spec/install_rock_spec.lua).
require("support.release_rock")("server", describe, it, lazy_setup, lazy_teardown)
