-- say-seed003: sentences for REPORT.md with the numbers of seed003: per
-- group of the non-sweep variants (align chunk, align none, chunk-nocap) the
-- share of bit-identical requests and forked generations; per sweep align
-- the range of the not-bit-identical share over C.
WITH
g AS (SELECT CASE WHEN variant LIKE '%nocap%' THEN 'chunk-nocap' ELSE 'align ' || coalesce(align, '-') END AS grp,
             min(vorder) AS vo, count(DISTINCT run_id) AS runs, count(*) AS n,
             100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ident,
             100.0 * sum(fork_step IS NOT NULL) / nullif(sum(n_decode > 0), 0) AS forked
      FROM req WHERE coalesce(variant, '') NOT LIKE 'sweep/%' GROUP BY grp),
gs AS (SELECT vo, printf('%s (%d run%s, %d requests): %.1f%% bit-identical, %s', grp, runs,
                         CASE WHEN runs = 1 THEN '' ELSE 's' END, n, ident,
                         CASE WHEN forked IS NULL THEN 'no decode steps compared'
                              ELSE printf('%.1f%% of generations forked', forked) END) AS t
       FROM g),
sw AS (SELECT run_id, min(align) AS align,
              coalesce(min(sweep_value), CASE WHEN min(align) = 'none' THEN min(ubatch) ELSE min(chunk) END) AS c,
              100.0 * avg(NOT (logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)) AS div
       FROM req WHERE variant LIKE 'sweep/%' GROUP BY run_id),
swa AS (SELECT align, min(div) AS mn, max(div) AS mx, count(*) AS k,
               group_concat(printf('%g', c), ', ') AS cs
        FROM (SELECT * FROM sw ORDER BY c) GROUP BY align)
SELECT 'In this database, over the variants: ' || group_concat(t, '; ') || '.'
FROM (SELECT t FROM gs ORDER BY vo) HAVING count(*) > 0
UNION ALL
SELECT 'In the chunk sweep: ' || group_concat(printf('align %s (C = %s): %s',
           coalesce(align, '-'), cs,
           CASE WHEN mn = mx THEN printf('%.1f%% of requests not bit-identical at every C', mn)
                ELSE printf('%.1f%% to %.1f%% of requests not bit-identical, depending on C', mn, mx) END), '; ') || '.'
FROM swa HAVING count(*) > 0;
