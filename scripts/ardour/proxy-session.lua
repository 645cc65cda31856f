-- Creates the Ardour session of the proxy test (crates/cli/tests/ardour.rs):
-- run by ardour7-lua (luasession), "None (Dummy)" backend, 48 kHz.
--
--   ardour7-lua proxy-session.lua DIR NAME FRAMES TRACK=TYPE=ID...
--
-- One mono track per TRACK=TYPE=ID, in order, each playing the same region
-- (0..FRAMES) into the plugin ID of TYPE (ladspa: its unique ID; lv2: its
-- URI), whose first control input is set to 1000 (lpf's cutoff, Hz):
-- e.g. local=ladspa=1051 (cmt's lpf itself) and
-- proxy=lv2=urn:firmtime:proxy:remote_lpf.
-- Track k's output feeds master input k; the master's panner is bypassed
-- (a 1:1 copy), so the master's output k is track k's, unchanged: one
-- export holds every track. Region fades are off and faders at unity, so
-- a track's output is its plugin's output, to the last bit.
--
-- Ardour 7 has no Lua binding to import a file: the region is made by
-- bouncing the first track (still silent, without its plugin), which
-- writes a float WAV of FRAMES frames in interchange/NAME/audiofiles/;
-- the caller replaces that file with the input audio before it loads the
-- session again.
-- Prints "source PATH", "plugin TRACK ID PATH" per track (PATH: the
-- library Ardour loaded; LV2 plugins have none) and "created DIR".

local dir, name = arg[1], arg[2]
local frames = tonumber(arg[3])
local specs = {}
for i = 4, #arg do
  local track, type, id = arg[i]:match("^([^=]+)=([^=]+)=(.+)$")
  assert(track and (type == "ladspa" or type == "lv2"), "bad track " .. arg[i] .. " (TRACK=ladspa|lv2=ID)")
  specs[#specs + 1] = { track = track, type = type, id = id }
end
assert(dir and name and frames and #specs > 0,
  "usage: proxy-session.lua DIR NAME FRAMES TRACK=TYPE=ID...")

local s = create_session(dir, name, 48000)
assert(s, "create_session " .. dir .. " failed")

local tracks = {}
for _, spec in ipairs(specs) do
  local l = s:new_audio_track(1, 1, nil, 1, spec.track, ARDOUR.PresentationInfo.max_order,
    ARDOUR.TrackMode.Normal, false, false)
  for t in l:iter() do tracks[#tracks + 1] = t end
  assert(#tracks > 0 and tracks[#tracks]:name() == spec.track, "new_audio_track " .. spec.track)
end

-- The region: a bounce of the (empty) first track, FRAMES long.
local region = tracks[1]:bounce_range(0, frames, ARDOUR.InterThreadInfo(),
  ARDOUR.LuaAPI.nil_proc(), false, "input")
assert(region and not region:isnil(), "bounce_range failed")
assert(region:length():samples() == frames, "region length " .. region:length():samples())
print("source " .. region:source(0):to_filesource():path())

for _, t in ipairs(tracks) do
  t:playlist():add_region(region, Temporal.timepos_t(0), 1, false)
  for r in t:playlist():region_list():iter() do
    local ar = r:to_audioregion()
    ar:set_fade_in_active(false)
    ar:set_fade_out_active(false)
  end
end

-- Master: one input and output per track, panner bypassed (1:1 copy).
local master = s:master_out()
while master:input():n_ports():n_audio() < #tracks do
  assert(master:input():add_port("", nil, ARDOUR.DataType("audio")) == 0, "master input")
end
while master:output():n_ports():n_audio() < #tracks do
  assert(master:output():add_port("", nil, ARDOUR.DataType("audio")) == 0, "master output")
end
master:panner_shell():set_bypassed(true)
-- No connections beyond the tracks' to the master (inputs unconnected,
-- the master's outputs too: the export reads them there): the tracks
-- play their region only, and a load on JACK makes fewer port requests.
master:output():disconnect_all(nil)
for i, t in ipairs(tracks) do
  local out = t:output()
  out:disconnect_all(nil)
  assert(out:connect(out:audio(0), master:input():audio(i - 1):name(), nil) == 0,
    "connect " .. t:name())
end

for i, spec in ipairs(specs) do
  local type = spec.type == "lv2" and ARDOUR.PluginType.LV2 or ARDOUR.PluginType.LADSPA
  local p = ARDOUR.LuaAPI.new_plugin(s, spec.id, type, "")
  assert(not p:isnil(), "no " .. spec.type .. " plugin " .. spec.id .. " (installed? worker up?)")
  assert(tracks[i]:add_processor_by_index(p, 0, nil, true) == 0, "add_processor " .. spec.id)
  assert(ARDOUR.LuaAPI.set_processor_param(p, 0, 1000), "set the cutoff of " .. spec.id)
  local info = p:to_insert():plugin(0):get_info()
  print("plugin " .. spec.track .. " " .. spec.id .. " " .. info.path)
end

assert(s:save_state("", false, false, false, false, false) == 0, "save_state")
print("created " .. dir)
io.stdout:flush()
-- Saved: leave without close_session(), where Ardour 7.3 crashes now and
-- then (see proxy-export.lua).
os.exit(0)
