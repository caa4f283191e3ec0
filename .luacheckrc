std = "lua54"
max_line_length = 100
files["spec"] = { std = "+busted" }
files["examples/plugin/units_spec.lua"] = { std = "+busted" }  -- a plugin's test
files["sandbox"] = { globals = { "tools", "parallel", "json" } }
files["examples/report.lua"] = { globals = { "tools", "parallel", "json" } }  -- a script
files["examples/reach/script.lua"] = { globals = { "tools", "parallel", "json" } }  -- a script
files["spec/sdk/three_tools.lua"] = { std = "lua54", globals = { "tools", "parallel", "json" } }  -- a script
files["examples/lighttpd"] = { globals = { "lighty" } }  -- mod_magnet's request API
exclude_files = { "build/**", "node_modules/**",
  "spec/fixtures/plugins/broken/b_syntax.lua" }  -- a syntax error on purpose
