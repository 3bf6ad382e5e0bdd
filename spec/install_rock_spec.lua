-- install_rock_spec.lua - a release rock's src rock installs on a machine that
-- has only the rock (the cases: spec/support/release_rock.lua; from a rocks
-- server: spec/install_server_spec.lua; the scm rockspec from a checkout:
-- spec/install_spec.lua).
require("support.release_rock")("src", describe, it, lazy_setup, lazy_teardown)
