"""GRPO recipe -> validated TRL config: variants, TRL field introspection, rules, emission."""
