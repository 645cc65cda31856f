-- Plays the session proxy-session.lua made, live, through JACK (the
-- server JACK_DEFAULT_SERVER names): Ardour's audio thread is then JACK's
-- real-time client thread, as in a studio.
--
--   ardour7-lua proxy-play.lua DIR NAME SECONDS
--
-- Prints "rolling" once the transport rolls, then "at T position P xruns X"
-- every 0.5 s, and "played SECONDS" at the end (after which the session
-- is closed: its plugins are cleaned up and report what they did).

local dir, name, seconds = arg[1], arg[2], tonumber(arg[3])
assert(dir and name and seconds, "usage: proxy-play.lua DIR NAME SECONDS")

assert(AudioEngine:set_backend("JACK", "firmtime-proxy-test", ""), "no JACK backend")
local s = load_session(dir, name)
assert(s, "load_session " .. dir .. " failed (is the JACK server up?)")
assert(AudioEngine:running(), "the engine does not run")
s:request_roll(ARDOUR.TransportRequestSource.TRS_UI)
sleep(0.2)
print("rolling")
io.stdout:flush()
local t = 0
while t < seconds do
  sleep(0.5)
  t = t + 0.5
  print("at " .. t .. " position " .. s:transport_sample() .. " xruns " .. s:get_xrun_count())
  io.stdout:flush()
end
s:request_stop(false, false, ARDOUR.TransportRequestSource.TRS_UI)
print("played " .. seconds)
io.stdout:flush()
close_session()
quit()
