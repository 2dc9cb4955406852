-- tab-seed000-anchor: per variant: fresh sessions, tokens prefilled by the
-- first session and the median over the later ones, median prompt tokens,
-- TTFT p50 reused (ms), anchors written (requests whose anchor write time
-- is > 0 or that record an anchor position), their total, mean and maximum
-- write time (ms).
WITH
later AS (SELECT run_id, n_prefilled AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY n_prefilled) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM req WHERE req_index > (SELECT min(req_index) FROM req r2 WHERE r2.run_id = req.run_id)),
prompt AS (SELECT run_id, n_prompt AS x,
                  row_number() OVER (PARTITION BY run_id ORDER BY n_prompt) AS k,
                  count(*) OVER (PARTITION BY run_id) AS n
           FROM req),
reuse AS (SELECT run_id, ttft_reuse_ms AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY ttft_reuse_ms) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM req WHERE ttft_reuse_ms IS NOT NULL),
l50 AS (SELECT run_id, avg(x) AS p50 FROM later WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
p50 AS (SELECT run_id, avg(x) AS p50 FROM prompt WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
r50 AS (SELECT run_id, avg(x) AS p50 FROM reuse WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
first AS (SELECT run_id, n_prefilled AS f FROM req r1
          WHERE req_index = (SELECT min(req_index) FROM req r2 WHERE r2.run_id = r1.run_id)),
per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS variant, count(*) AS n,
               sum(anchor_write > 0 OR anchor_at IS NOT NULL) AS na,
               sum(anchor_write) AS tot, max(anchor_write) AS mx
        FROM req GROUP BY run_id)
SELECT coalesce(per.variant, 'run ' || per.run_id) AS "variant",
       per.n AS "sessions",
       first.f AS "prefilled, session 1",
       CASE WHEN (l50.p50) IS NULL THEN '-' ELSE printf('%g', l50.p50) END AS "prefilled, later sessions (p50)",
       printf('%g', p50.p50) AS "prompt tokens (p50)",
       CASE WHEN (r50.p50) IS NULL THEN '-' ELSE printf('%.2f', r50.p50) END AS "TTFT p50 reused (ms)",
       per.na AS "anchors written",
       printf('%.2f', per.tot) AS "anchor write total (ms)",
       CASE WHEN (per.tot / nullif(per.na, 0)) IS NULL THEN '-' ELSE printf('%.2f', per.tot / nullif(per.na, 0)) END AS "per anchor (ms)",
       printf('%.2f', per.mx) AS "max (ms)"
FROM per LEFT JOIN first USING (run_id) LEFT JOIN l50 USING (run_id)
     LEFT JOIN p50 USING (run_id) LEFT JOIN r50 USING (run_id)
ORDER BY per.vo, per.run_id;
