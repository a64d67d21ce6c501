"""Builds a PEFT adapter folder that, loaded over the tiny model, makes it compute the SFT warm start's function:
q_proj through a rank-64 LoRA holding the exact delta (A = I), every other module through modules_to_save holding the
warm start's tensors. usage: make_swap_adapter.py BASE_MODEL_DIR WARM_MODEL_DIR OUT_DIR"""
import sys, torch
from transformers import AutoModelForCausalLM
from peft import LoraConfig, get_peft_model
base_dir, warm_dir, out = sys.argv[1:4]
base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
warm = AutoModelForCausalLM.from_pretrained(warm_dir, dtype=torch.float32)
others = ["k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "input_layernorm",
          "post_attention_layernorm", "norm", "embed_tokens", "lm_head"]
cfg = LoraConfig(r=64, lora_alpha=64, target_modules=["q_proj"], modules_to_save=others, lora_dropout=0.0,
                 init_lora_weights=False)
peft = get_peft_model(base, cfg)
wsd = warm.state_dict()
with torch.no_grad():
    for name, module in peft.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            key = name.replace("base_model.model.", "") + ".weight"
            delta = wsd[key] - module.base_layer.weight
            module.lora_A["default"].weight.copy_(torch.eye(64))
            module.lora_B["default"].weight.copy_(delta)
        if type(module).__name__ == "ModulesToSaveWrapper":
            prefix = name.replace("base_model.model.", "")
            for pname, p in module.modules_to_save["default"].named_parameters():
                p.copy_(wsd[prefix + "." + pname])
peft.save_pretrained(out)
print("saved", out)
