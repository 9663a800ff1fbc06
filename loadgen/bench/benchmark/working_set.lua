-- wrk: GET /files/<name> for names drawn at random from a list (one a line,
-- the file given after `--`), so every request may ask for another file of
-- the working set. wrk gives each thread its own Lua state: setup() numbers
-- them, and each seeds its draws with its number, so a run asks for the
-- same names in the same order every time.
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

local names = {}

function init(args)
  for line in io.lines(args[1]) do
    names[#names + 1] = "/files/" .. line
  end
  if #names == 0 then
    error("no names in " .. tostring(args[1]))
  end
  math.randomseed(thread_number)
end

function request()
  return wrk.format("GET", names[math.random(#names)])
end
