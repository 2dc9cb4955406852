-- traces-route: routing on 8 instances with local caches (Dynamo's KV router
-- against round-robin). Series: the route; rows: 1 bar group (0 hit rate,
-- 1 TTFT p50, 2 TTFT p99), 2 its label, 3 value.
.read plots/traces-lib.sql
WITH p AS (SELECT substr(variant, 7) AS route, run_id, hit_rate_tokens, ttft_p50_ms, ttft_p99_ms
           FROM sim_sel WHERE variant LIKE 'route/%'),
v AS (SELECT route, run_id, 0 AS g, 'hit rate' AS l, hit_rate_tokens AS x FROM p
      UNION ALL SELECT route, run_id, 1, 'TTFT p50 (s)', ttft_p50_ms / 1000.0 FROM p
      UNION ALL SELECT route, run_id, 2, 'TTFT p99 (s / 10)', ttft_p99_ms / 10000.0 FROM p)
SELECT route, g, l, printf('%.4f', x) FROM v ORDER BY run_id, g;
