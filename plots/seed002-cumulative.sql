-- seed002-cumulative: per request in replay order: series, turn (req_index
-- + 1), cumulative TTFT (s) up to and including it (lib.sql's cum_ttft), for
-- the synthetic models (the real RWKV-7 model has its own figure,
-- seed002-rwkv7).
-- runs: coalesce(variant, '') NOT LIKE 'rwkv7/%'
SELECT series, req_index + 1, printf('%.6f', s) FROM cum_ttft ORDER BY part, o, series, req_index;
