// Adapters on disk in PEFT's format, so PEFT loads what ftune writes and ftune loads what PEFT
// writes: DIR/adapter_config.json (LoraConfig fields, peft_type LORA, task_type SEQ_CLS, or CAUSAL_LM for a causal LM) and
// DIR/adapter_model.safetensors with PEFT's keys, "base_model.model." + the parameter name:
//   base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight   (r, in)
//   base_model.model.bert.encoder.layer.0.attention.self.query.lora_B.weight   (out, r)
//   base_model.model.bert.encoder.layer.0.attention.self.query.lora_magnitude_vector  (DoRA)
//   base_model.model.classifier.weight, ...    (modules_to_save: the head, BERT's pooler if asked)
// Also the merge of the adapters into the base weights (for `ftune export --merge`).
#pragma once

#include <string>

#include "models/adapter_config.h"
#include "models/sequence_classifier.h"

namespace ftune {

// Reads DIR/adapter_config.json. PEFT features ftune does not implement (bias other than none,
// fan_in_fan_out, rank/alpha patterns, layers_to_transform, LoRA bias, another peft_type) are
// an InputError naming the key.
AdapterConfig read_peft_adapter_config(const std::string& dir);

// Fills the model's adapter and head parameters (model built with read_peft_adapter_config's
// config, base weights loaded) from DIR/adapter_model.safetensors. A missing or unexpected tensor
// or a wrong shape is an InputError naming the file and tensor.
void load_peft_adapter(SequenceClassifier& model, const std::string& dir);

// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (each atomically).
// target_modules is written as the explicit list of adapted module names.
void save_peft_adapter(const SequenceClassifier& model, const std::string& dir,
                       const std::string& base_model_name_or_path = "");

// Folds every adapter into its frozen weight, as PEFT's merge_and_unload:
//   LoRA: W <- W + s B A ;  DoRA: W <- (m / ||W + s B A||_row) * (W + s B A)
// After it, param_values() alone (save_model) is the fine-tuned model.
void merge_adapters(SequenceClassifier& model);

// merge_adapters, then save_model to DIR, keeping the precision of the base checkpoint at
// base_dir: a weight the model stores in 16 bits (frozen_16bit()) that the checkpoint holds in
// another type (F32, or the other 16-bit type) is read again from it, merged in fp32 on the host
// and written from there, so an fp32 base trained with a bf16 frozen copy saves fp32 weights
// (a bf16 base saves what a bf16 merge gives, as PEFT's merge_and_unload). The others merge in
// place as merge_adapters does.
void save_merged_model(SequenceClassifier& model, const std::string& base_dir,
                       const std::string& dir);

}  // namespace ftune
