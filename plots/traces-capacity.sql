-- traces-capacity: the capacity sweep (the Mooncake paper's Figure 9). Series:
-- policy/eviction (block-hash first, the order of the runs); rows: 1 capacity
-- (tokens), 2 hit rate by tokens, 3 hit rate by blocks.
.read plots/traces-lib.sql
SELECT substr(variant, 10), printf('%.0f', sweep_value), printf('%.5f', hit_rate_tokens), printf('%.5f', hit_rate_blocks)
FROM sim_sel
WHERE variant LIKE 'capacity/%'
ORDER BY (SELECT min(run_id) FROM sim_sel z WHERE z.variant = sim_sel.variant), sweep_value;
