-- traces-pool: local caches against one global pool on 10 instances (the
-- Mooncake paper's Figure 10). Series: local, global; rows: 1 bar group
-- (0 hit rate, 1 mean prefill time, 2 mean TTFT), 2 its label, 3 value.
.read plots/traces-lib.sql
WITH p AS (SELECT substr(variant, 6) AS pool, run_id, hit_rate_tokens, prefill_mean_ms, ttft_mean_ms
           FROM sim_sel WHERE variant LIKE 'pool/%')
SELECT pool, 0, 'hit rate', printf('%.4f', hit_rate_tokens) FROM p
UNION ALL SELECT pool, 1, 'prefill (s)', printf('%.4f', prefill_mean_ms / 1000.0) FROM p
UNION ALL SELECT pool, 2, 'TTFT (s)', printf('%.4f', ttft_mean_ms / 1000.0) FROM p
ORDER BY 1 DESC, 2;
