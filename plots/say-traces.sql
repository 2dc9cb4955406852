-- say-traces: one paragraph for REPORT.md: the ideal hit rate, where the LRU
-- curve crosses half of it, and the cluster results.
.read plots/traces-lib.sql
WITH cap AS (SELECT sweep_value AS c, hit_rate_tokens AS h FROM sim_sel WHERE variant = 'capacity/block-hash/lru'),
top AS (SELECT max(h) AS h FROM cap),
half AS (SELECT min(c) AS c FROM cap, top WHERE cap.h >= top.h / 2)
SELECT printf('On the conversation trace an unbounded cache reuses %.1f%% of the input tokens; block-hash with LRU reaches half of that at %s tokens of capacity (in this sweep) and %.1f%% at the largest capacity. ',
              100 * top.h, printf('%.0e', half.c), 100 * (SELECT h FROM cap ORDER BY c DESC LIMIT 1))
       || coalesce((SELECT printf('On 10 instances of 3M tokens a global pool reuses %.1f%% against %.1f%% for local caches; on 8, cache-aware routing reuses %.1f%% against %.1f%% for round-robin.',
                                  100 * max(CASE variant WHEN 'pool/global' THEN hit_rate_tokens END),
                                  100 * max(CASE variant WHEN 'pool/local' THEN hit_rate_tokens END),
                                  100 * max(CASE variant WHEN 'route/cache-aware' THEN hit_rate_tokens END),
                                  100 * max(CASE variant WHEN 'route/round-robin' THEN hit_rate_tokens END))
                    FROM sim_sel), '')
FROM top, half;
