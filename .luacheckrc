-- luacheck configuration for the pure-Lua modules and their busted specs.
std = "lua54"
max_line_length = 100

files["spec/"] = {
  std = "+busted",
}
