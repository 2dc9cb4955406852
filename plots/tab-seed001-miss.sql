-- tab-seed001-miss: why the cache missed: per variant, the (at most 5) most
-- frequent miss_where values (where the prompt first leaves the best cached
-- prefix), with their share of the variant's requests, the most common
-- miss_pos (token position) and the range of miss_pos. Requests without a
-- recorded miss (the first request, or a full hit) count as "(no miss recorded)".
WITH
m AS (SELECT vorder, coalesce(variant, 'run ' || run_id) AS variant,
             replace(replace(coalesce(miss_where, '(no miss recorded)'), '|', '/'), char(10), ' ') AS w,
             miss_pos
      FROM req),
tot AS (SELECT variant, count(*) AS n FROM m GROUP BY variant),
g AS (SELECT min(vorder) AS vo, variant, w, count(*) AS n, min(miss_pos) AS lo, max(miss_pos) AS hi
      FROM m GROUP BY variant, w),
p AS (SELECT variant, w, miss_pos, count(*) AS c,
             row_number() OVER (PARTITION BY variant, w ORDER BY count(*) DESC, miss_pos) AS rk
      FROM m WHERE miss_pos IS NOT NULL GROUP BY variant, w, miss_pos),
r AS (SELECT g.*, row_number() OVER (PARTITION BY g.variant ORDER BY g.n DESC, g.w) AS rk FROM g)
SELECT r.variant AS "variant", r.w AS "miss_where", r.n AS "requests",
       printf('%.1f', 100.0 * r.n / tot.n) AS "% of variant",
       coalesce(p.miss_pos || ' (' || p.c || 'x)', '-') AS "most common miss_pos",
       CASE WHEN r.lo IS NULL THEN '-' WHEN r.lo = r.hi THEN CAST(r.lo AS TEXT)
            ELSE r.lo || '..' || r.hi END AS "miss_pos range"
FROM r JOIN tot USING (variant)
     LEFT JOIN p ON p.variant = r.variant AND p.w = r.w AND p.rk = 1
WHERE r.rk <= 5
ORDER BY r.vo, r.rk;
