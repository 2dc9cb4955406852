-- tab-seed000-anchor: per variant: fresh sessions; over the first request of
-- each session: tokens prefilled by the first session, the median over the
-- later sessions, the median prompt, TTFT p50 reused (ms); over all
-- requests: anchors written (anchor write time > 0 or an anchor position
-- recorded), their total, mean and maximum write time (ms).
WITH
firsts AS (SELECT * FROM req WHERE req_index = first_idx),
later AS (SELECT run_id, n_prefilled AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY n_prefilled) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM firsts WHERE session_no > 1),
prompt AS (SELECT run_id, n_prompt AS x,
                  row_number() OVER (PARTITION BY run_id ORDER BY n_prompt) AS k,
                  count(*) OVER (PARTITION BY run_id) AS n
           FROM firsts),
reuse AS (SELECT run_id, ttft_reuse_ms AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY ttft_reuse_ms) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM firsts WHERE ttft_reuse_ms IS NOT NULL),
l50 AS (SELECT run_id, avg(x) AS p50 FROM later WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
p50 AS (SELECT run_id, avg(x) AS p50 FROM prompt WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
r50 AS (SELECT run_id, avg(x) AS p50 FROM reuse WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
first AS (SELECT run_id, n_prefilled AS f FROM firsts WHERE session_no = 1),
per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS variant, max(session_no) AS n,
               count(*) AS nreq, sum(anchor_write > 0 OR anchor_at IS NOT NULL) AS na,
               sum(anchor_write) AS tot, max(anchor_write) AS mx
        FROM req GROUP BY run_id)
SELECT coalesce(per.variant, 'run ' || per.run_id) AS "variant",
       per.n AS "sessions",
       per.nreq AS "requests",
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
