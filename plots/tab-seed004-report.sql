-- tab-seed004-report: the issue report's own table (seeds/004: context size,
-- cold prefill, cache reuse of the second query, status), one row per
-- context length (sweep_value) of the runs in fig_runs, quirk and fixed side
-- by side. Q1 is the first request (turn 0: both variants prefill it whole,
-- its cold TTFT is the report's "cold prefill"), Q2 the second (turn 1: the
-- report's "cache reuse (Q2)"). Three kinds of seconds:
--   "report": the report's own figures (llama.cpp on an NVIDIA L4, Qwen3.5-35B-A3B,
--     at 23K, 112K and 258K; its "cache reuse" is the whole request, answer included);
--   "here": measured (wall clock on this machine) / modeled (the run's work priced
--     at its calibration) for the model the experiment ran;
--   "L4": the report's model and device, modeled: the tokens each request prefilled,
--     at the positions it prefilled them, priced by the cost profile
--     qwen3.5-35b-a3b-l4 below (docs/experiments.md, "The report's own model").
-- "reuse" is the reuse fraction of the follow-up requests (turn > 0); a variant
-- whose follow-ups reuse under 10% of their prompts "re-prefills everything".
-- identical: the requests bit-identical to cold over both variants (logits,
-- decode, state). A run that has not stored all its requests is marked
-- "partial: K of N".
WITH
-- The cost profile qwen3.5-35b-a3b-l4 (docs/experiments.md has its sources): FLOPs
-- per token outside attention (2 x 2.44e9 active non-embedding parameters, and the
-- Gated DeltaNet recurrence), attention FLOPs per (query, key) pair (10 layers x 4 x
-- 16 heads x 256), the rates fitted to the report's cold column, the state restored
-- per cached token (f16 KV, 10 layers x 2 KV heads x 256 x 2 x 2 bytes) and per
-- state (30 Gated DeltaNet layers: 32 heads x 128 x 128 x 4 bytes, and conv), and
-- PCIe 4.0 x16. When `kvreplay simulate` holds named profiles, this one belongs
-- there and this query should read it.
prof(c_lin, c_attn, r_lin, r_attn, kv_tok, state, r_io) AS
    (VALUES (4.93e9, 163840.0, 5.906e12, 24.32e12, 20480.0, 6.6e7, 25e9)),
l4 AS (
    SELECT q.run_id, q.turn,
           (p.c_lin * q.n_prefilled / p.r_lin
            + p.c_attn * (1.0 * q.n_prefilled * q.n_reused + 0.5 * q.n_prefilled * (q.n_prefilled + 1)) / p.r_attn
            + CASE WHEN x.note LIKE 'prompt cache:%' THEN p.kv_tok * q.n_reused + p.state
                   WHEN x.note LIKE 'restored context checkpoint%' THEN p.state ELSE 0 END / p.r_io) AS s,
           (p.c_lin * q.n_prompt / p.r_lin + p.c_attn * 0.5 * q.n_prompt * (q.n_prompt + 1) / p.r_attn) AS cold_s
    FROM req q JOIN requests x ON x.run_id = q.run_id AND x.req_index = q.req_index, prof p),
report(ctx, cold, q2) AS (VALUES (23000, 20.9, 0.8), (112000, 136.9, 1.5), (258000, 437.6, 437.6)),
per AS (
    SELECT r.run_id, min(r.variant) AS v, min(r.sweep_value) AS ctx, count(*) AS n,
           (SELECT n_requests FROM fig_runs f WHERE f.run_id = r.run_id) AS planned,
           max(CASE WHEN r.turn = 0 THEN r.n_prompt END) AS np,
           max(CASE WHEN r.turn = 0 THEN r.ttft_cold_ms END) / 1e3 AS q1_cold,
           max(CASE WHEN r.turn = 0 THEN r.model_cold_ms END) / 1e3 AS q1_cold_m,
           max(CASE WHEN r.turn = 0 THEN l.cold_s END) AS q1_l4,
           max(CASE WHEN r.turn = 1 THEN r.ttft_reuse_ms END) / 1e3 AS q2,
           max(CASE WHEN r.turn = 1 THEN r.model_reuse_ms END) / 1e3 AS q2_m,
           max(CASE WHEN r.turn = 1 THEN l.s END) AS q2_l4,
           1.0 * sum(CASE WHEN r.turn > 0 THEN r.n_reused END)
               / nullif(sum(CASE WHEN r.turn > 0 THEN r.n_prompt END), 0) AS rf,
           sum(r.logits_equal = 1 AND r.decode_equal = 1 AND coalesce(r.state_equal, 1) = 1) AS ident
    FROM req r JOIN l4 l ON l.run_id = r.run_id AND l.turn = r.turn
    WHERE r.sweep_value IS NOT NULL GROUP BY r.run_id),
ctx AS (SELECT DISTINCT ctx FROM per),
q AS (SELECT * FROM per WHERE v = 'quirk'),
f AS (SELECT * FROM per WHERE v = 'fixed')
SELECT printf('%gK', c.ctx / 1000) AS "context",
       coalesce(q.np, f.np) AS "prompt tokens",
       CASE WHEN rp.cold IS NULL THEN '-' ELSE printf('%.1f / %.1f', rp.cold, rp.q2) END AS "report: cold Q1 / Q2, s",
       CASE WHEN coalesce(q.q1_cold, f.q1_cold) IS NULL THEN '-'
            ELSE printf('%.1f / %.1f / %.1f', coalesce(q.q1_cold, f.q1_cold), coalesce(q.q1_cold_m, f.q1_cold_m),
                        coalesce(q.q1_l4, f.q1_l4)) END
           AS "cold Q1, s: here measured / modeled / L4 modeled",
       CASE WHEN q.q2 IS NULL THEN '-' ELSE printf('%.1f / %.1f / %.2f', q.q2, q.q2_m, q.q2_l4) END
           AS "quirk Q2, s (same)",
       CASE WHEN q.rf IS NULL THEN '-' WHEN q.rf < 0.1 THEN printf('re-prefills everything (%.3f)', q.rf)
            ELSE printf('reuses (%.3f)', q.rf) END
       || CASE WHEN q.n < q.planned THEN printf(', partial: %d of %d', q.n, q.planned) ELSE '' END AS "quirk: status (reuse)",
       CASE WHEN f.q2 IS NULL THEN '-' ELSE printf('%.1f / %.1f / %.2f', f.q2, f.q2_m, f.q2_l4) END
           AS "fixed Q2, s (same)",
       CASE WHEN f.rf IS NULL THEN '-' WHEN f.rf < 0.1 THEN printf('re-prefills everything (%.3f)', f.rf)
            ELSE printf('reuses (%.3f)', f.rf) END
       || CASE WHEN f.n < f.planned THEN printf(', partial: %d of %d', f.n, f.planned) ELSE '' END AS "fixed: status (reuse)",
       printf('%d of %d', coalesce(q.ident, 0) + coalesce(f.ident, 0), coalesce(q.n, 0) + coalesce(f.n, 0))
           AS "bit-identical"
FROM ctx c LEFT JOIN q ON q.ctx = c.ctx LEFT JOIN f ON f.ctx = c.ctx LEFT JOIN report rp ON rp.ctx = c.ctx
ORDER BY c.ctx;
