-- tab-modeled: the deterministic companion of every TTFT figure, one row per
-- run in fig_runs: run (variant and sweep value), requests, prefilled tokens,
-- the reused prefill's work (GFLOP of the cost model) and the bytes restored
-- from the cache, the price (the calibration the run was priced at), and the
-- modeled TTFT p50 cold and reused with their ratio (ms; the middle value or
-- the mean of the two middle ones). Every column is a function of the
-- transcript, the configuration and the price: priced at a reference
-- calibration, two runs give this table byte for byte.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(run_name) AS rn,
               min(sweep_value) AS sv, count(*) AS n, sum(n_prefilled) AS npf,
               sum(flops_reuse) / 1e9 AS gf, sum(bytes_restored) AS br,
               min(price_gflops) AS pg, min(price_restore_gbs) AS pb
        FROM req GROUP BY run_id)
SELECT per.rn AS "run",
       per.n AS "requests",
       per.npf AS "prefilled tokens",
       CASE WHEN per.gf IS NULL THEN '-' ELSE printf('%.3f', per.gf) END AS "GFLOP reused",
       coalesce(per.br, '-') AS "bytes restored",
       CASE WHEN per.pg IS NULL THEN '-' ELSE printf('%.6g / %.6g', per.pg, per.pb) END AS "price GFLOP/s / GB/s",
       CASE WHEN t.model_cold_p50 IS NULL THEN '-' ELSE printf('%.3f', t.model_cold_p50) END AS "modeled TTFT p50 cold (ms)",
       CASE WHEN t.model_reuse_p50 IS NULL THEN '-' ELSE printf('%.3f', t.model_reuse_p50) END AS "modeled TTFT p50 reused (ms)",
       CASE WHEN t.model_cold_p50 / nullif(t.model_reuse_p50, 0) IS NULL THEN '-'
            ELSE printf('%.2fx', t.model_cold_p50 / nullif(t.model_reuse_p50, 0)) END AS "modeled speedup p50"
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
ORDER BY per.vo, per.sv, per.run_id;
