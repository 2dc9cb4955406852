-- traces-ttft: TTFT CDFs of the cluster runs (pool/* and route/*). Series:
-- the variant; rows: 1 TTFT (s), 2 fraction of requests at or below it
-- (every 10th request of the sorted order, and the last).
.read plots/traces-lib.sql
WITH q AS (SELECT s.variant, r.run_id, q.ttft_ms,
                  row_number() OVER (PARTITION BY r.run_id ORDER BY q.ttft_ms) AS k,
                  count(*) OVER (PARTITION BY r.run_id) AS n
           FROM sim_sel s JOIN runs r USING (run_id) JOIN sim_requests q ON q.run_id = r.run_id
           WHERE s.variant LIKE 'pool/%' OR s.variant LIKE 'route/%')
SELECT variant, printf('%.4f', ttft_ms / 1000.0), printf('%.5f', 1.0 * k / n)
FROM q WHERE k % 10 = 0 OR k = n
ORDER BY run_id, k;
