-- One sync of a host's shared limiters with its site's buckets (rctl,
-- dataplane/fleet/src/shared/mod.rs). Atomic: Redis runs it whole.
--
-- KEYS[1]: the site's live hosts (sorted set, scored by last sync)
-- KEYS[2]: the site's bans (stream)
-- ARGV[1]: this host; ARGV[2]: the last ban id this host has read;
-- ARGV[3]: how long (ms) a host counts as live after its last sync;
-- ARGV[4]: 1 to read bans; ARGV[5]: n, the number of buckets below;
-- then 7 arguments a bucket: key, interval (µs), admitted, hits,
-- ban (µs left, 0: none), how long (ms) to keep it once idle, its label
-- (limiter and key id) in the ban stream.
--
-- A bucket is a hash: t, the theoretical arrival time (µs, Redis's clock),
-- moved one interval per admission from max(t, now); n and h, the
-- admissions and hits of the whole site; b, the end of a ban (µs).
-- Returns {now, live hosts, {ahead, n, h, ban left} per bucket,
-- {id, label, ban left} per ban read (0 left for this host's own)};
-- numbers as strings. The ban stream's entries: k (label), u (end, µs),
-- h (the host that made it). XRANGE's exclusive start needs Redis 6.2.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local live = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - live * 1000)
redis.call('PEXPIRE', KEYS[1], live * 10)
local hosts = redis.call('ZCARD', KEYS[1])
local out = {}
for i = 0, tonumber(ARGV[5]) - 1 do
  local a = 6 + i * 7
  local key = ARGV[a]
  local interval = tonumber(ARGV[a + 1])
  local admitted = tonumber(ARGV[a + 2])
  local hits = tonumber(ARGV[a + 3])
  local ban = tonumber(ARGV[a + 4])
  local keep = tonumber(ARGV[a + 5])
  local v = redis.call('HMGET', key, 't', 'n', 'h', 'b')
  local tat = tonumber(v[1]) or 0
  local n = (tonumber(v[2]) or 0) + admitted
  local h = (tonumber(v[3]) or 0) + hits
  local b = tonumber(v[4]) or 0
  if tat < now then tat = now end
  tat = tat + admitted * interval
  if ban > 0 and now + ban > b then
    b = now + ban
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', 10000, '*', 'k', ARGV[a + 6], 'u',
      string.format('%.0f', b), 'h', ARGV[1])
  end
  redis.call('HSET', key, 't', string.format('%.3f', tat), 'n', string.format('%.0f', n),
    'h', string.format('%.0f', h), 'b', string.format('%.0f', b))
  local idle = math.max(tat - now, b - now, 0) / 1000 + keep
  redis.call('PEXPIRE', key, math.ceil(idle))
  out[#out + 1] = {string.format('%.0f', tat - now), string.format('%.0f', n),
    string.format('%.0f', h), string.format('%.0f', math.max(b - now, 0))}
end
local bans = {}
if ARGV[4] == '1' then
  for _, e in ipairs(redis.call('XRANGE', KEYS[2], '(' .. ARGV[2], '+', 'COUNT', 1000)) do
    local f = e[2]
    local left = tonumber(f[4]) - now
    -- This host's own bans are read past (it holds them already).
    if f[6] == ARGV[1] then left = 0 end
    bans[#bans + 1] = {e[1], f[2], string.format('%.0f', left)}
  end
end
redis.call('PEXPIRE', KEYS[2], 86400000)
return {string.format('%.0f', now), hosts, out, bans}
