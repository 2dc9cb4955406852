-- seed002-rwkv7: as seed002-cumulative, for the variants on the real
-- RWKV-7 model (converted from rwkv.cpp): series, turn, cumulative TTFT (s).
-- runs: variant LIKE 'rwkv7/%'
SELECT series, req_index + 1, printf('%.6f', s) FROM cum_ttft ORDER BY part, o, series, req_index;
