ngx.say("hello") -- luacheck: globals ngx
