"""Issue 33's own mutation audit (20 small realistic bugs of this session's choosing, not the issue's): the
tests that kill its survivors, each a promise of the README checked at its boundary through the core API
(build_reward_funcs, the rewards as TRL calls them), with inputs whose scores are known by construction."""

from __future__ import annotations

from mcp_server.rewards import build_reward_funcs


def score(spec: dict, completions: list, **columns) -> list[float]:
    return build_reward_funcs([spec])[0](completions, **columns)


def test_correctness_collapses_whitespace_and_folds_case_only_when_asked():
    # "exactly (whitespace collapsed)": inner runs of spaces and newlines are one space.
    assert score({"name": "correctness_reward"}, ["<answer>New   York\n</answer>", "<answer>new york</answer>"],
                 answer=["New York", "New York"]) == [2.0, 0.0]
    assert score({"name": "correctness_reward", "params": {"ignore_case": True}}, ["<answer>new york</answer>"],
                 answer=["New York"]) == [2.0]


def test_a_conversation_is_scored_on_its_last_assistant_message():
    chat = [{"role": "assistant", "content": "<answer>1</answer>"}, {"role": "tool", "content": "hint"},
            {"role": "assistant", "content": "<answer>2</answer>"}]
    assert score({"name": "correctness_reward"}, [chat], answer=["2"]) == [2.0]


def test_the_json_reward_reads_the_last_json_block():
    text = 'Draft:\n```json\n{"nope": 1}\n```\nFinal:\n```json\n{"name": "x"}\n```'
    spec = {"name": "json_schema_reward", "params": {"schema": {"type": "object", "required": ["name"]}}}
    assert score(spec, [text]) == [1.0]
    assert score(spec, [text.replace('{"name": "x"}', '{"nope": 2}')]) == [0.0]


def test_format_refuses_a_repeated_opening_tag():
    right = "<reasoning>r</reasoning><answer>2</answer>"
    hedged = right + " <answer>3"  # a second answer opened: not the format
    assert score({"name": "format_reward", "params": {"strict": False}}, [right, hedged]) == [1.0, 0.0]


def test_a_pass_needs_more_agreement_than_disagreement_and_a_sentence_for_any():
    from mcp_server.inspection.gate import pass_problem

    note = "the two misses are formatting noise"
    assert "is a fail" in pass_problem(5, 5, note)  # half disagreeing: the reward scores as many wrong as right
    assert pass_problem(6, 5, note) is None
    assert "needs a note" in pass_problem(10, 1, "looks fine overall")  # three words are not a sentence
    assert pass_problem(10, 1, "looks fine overall, truly") is None
    assert pass_problem(10, 0, "") is None


def test_length_advice_rounds_to_64_and_says_nothing_when_over_1_percent_is_cut():
    from mcp_server.inspection.lengths import length_advice

    lengths = [40] * 98 + [70, 80]
    advice = length_advice(lengths, [False] * 100, 512, [30])
    assert advice["suggested_max_completion_length"] == 128 and advice["suggested_vllm_max_model_length"] == 192
    one = length_advice([40] * 99 + [512], [False] * 99 + [True], 512, [30])  # 1% cut off: still measured
    assert one["suggested_max_completion_length"] is not None
    two = length_advice([40] * 98 + [512, 512], [False] * 98 + [True, True], 512, [30])  # 2%: censored
    assert two["suggested_max_completion_length"] is None and "hit max_new_tokens=512" in two["advice"]


def test_every_field_that_changes_the_objective_is_pinned(workspace, tiny_model):
    import yaml

    from mcp_server.inspection.pins import changes, config_pins
    from mcp_server.runs import Run
    from support import hand_made_run

    run_dir = hand_made_run(workspace, tiny_model, "objective", [["a", "b", "c", "d"]] * 13, ["2"] * 13)
    config_file = run_dir / "train" / "config.yaml"
    original = yaml.safe_load(config_file.read_text())
    before = config_pins(Run(run_dir))
    objective = {"beta": 0.3, "epsilon": 0.1, "loss_type": "grpo", "scale_rewards": "none", "num_iterations": 2,
                 "importance_sampling_level": "sequence", "mask_truncated_completions": True,
                 "top_entropy_quantile": 0.2}
    for field, value in objective.items():
        config_file.write_text(yaml.safe_dump({**original, field: value}))
        assert any(field in line for line in changes(before, config_pins(Run(run_dir)))), field
