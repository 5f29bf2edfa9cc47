// Training FLOP count against hand computations, the GPU peak table lookup (names as CUDA reports
// them, precision and TF32 choice, no entry shadowed by an earlier one), and the FLOP / MFU fields
// of a real run's summary.json.
#include "train/flops.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/batch.h"
#include "models/bert/encoder_config.h"
#include "models/deberta/deberta_config.h"
#include "models/deberta/deberta_family.h"
#include "run_cli.h"
#include "test_util.h"
#include "tiny_model.h"

namespace ftune::test {
namespace {

TEST(Flops, BertBaseAt128MatchesHandCount) {
  // L 12, C 768, F 3072, K 2, T 128:
  //   N = 12·(4·768² + 2·768·3072) = 12·(2,359,296 + 4,718,592) = 84,934,656
  //   6·N·T = 65,229,815,808;  12·L·C·T² = 12·12·768·16,384 = 1,811,939,328
  //   6·(C² + C·K) = 6·(589,824 + 1,536) = 3,548,160;  sum 67,045,303,296
  const FlopModel bert{12, 768, 3072, 2};
  EXPECT_DOUBLE_EQ(matmul_params(bert), 84934656.0);
  EXPECT_DOUBLE_EQ(training_flops_per_sequence(bert, 128), 67045303296.0);
  // all-MiniLM-L6-v2 (L 6, C 384, F 1536): N = 6·(589,824 + 1,179,648) = 10,616,832; at T = 64:
  // 6·N·64 = 4,076,863,488 + 12·6·384·4096 = 113,246,208 + 6·(147,456 + 768) = 889,344.
  EXPECT_DOUBLE_EQ(training_flops_per_sequence(FlopModel{6, 384, 1536, 2}, 64), 4190999040.0);
  EXPECT_DOUBLE_EQ(training_flops_per_sequence(bert, 0), 0.0);
}

// A decoder whose heads are not C wide (Gemma: 8 x 256 = 2048 < 2304) with GQA and layers that
// alternate a 64-token window and global attention, L 4, F 9216, K 3, T 128:
//   N = 4·(2·2304·2048 + 2·2304·1024 + 3·2304·9216) = 311,427,072
//   pairs = 2·128·64 + 2·128·128 = 49,152;  12·q·pairs = 1,207,959,552
//   6·N·T = 239,176,007,680;  6·(C² + C·K) = 31,891,968;  sum 240,415,842,816
TEST(Flops, DecoderHeadsNarrowerThanHiddenAndAlternatingWindows) {
  FlopModel m{4, 2304, 9216, 3};
  m.q_hidden = 2048;
  m.kv_hidden = 1024;
  m.gated_ffn = true;
  m.layer_windows = {64, 0, 64, 0};
  EXPECT_DOUBLE_EQ(matmul_params(m), 311427072.0);
  EXPECT_DOUBLE_EQ(attention_pairs(m, 128), 49152.0);
  EXPECT_DOUBLE_EQ(training_flops_per_sequence(m, 128), 240415842816.0);
  m.layer_windows = {64, 0, 64};  // one per layer, or it is a bug in the family
  EXPECT_THROW(training_flops_per_sequence(m, 128), InternalError);
}

// DeBERTa-v3-base (L 12, C 768, F 3072, K 3; c2p and p2c over 2 x 256 buckets): BERT's count plus
// 6·2·L·T·min(512, 2·T)·C: at T = 128, 3,623,878,656 (a row reaches 256 buckets); at T = 512,
// 28,991,029,248 (all 512).
TEST(Flops, DebertaCountsItsRelativePositionTerms) {
  FlopModel m{12, 768, 3072, 3};
  m.relative_span = 512;
  m.relative_terms = 2;
  EXPECT_DOUBLE_EQ(training_flops_per_sequence(m, 128), 70669186560.0);
  EXPECT_DOUBLE_EQ(training_flops_per_sequence(m, 512), 318904874496.0);
  const nlohmann::json config = {
      {"model_type", "deberta-v2"}, {"vocab_size", 1000},          {"hidden_size", 768},
      {"num_hidden_layers", 12},    {"num_attention_heads", 12},   {"intermediate_size", 3072},
      {"max_position_embeddings", 512}, {"relative_attention", true}, {"position_buckets", 256},
      {"pos_att_type", "p2c|c2p"},  {"share_att_key", true},       {"type_vocab_size", 0},
      {"position_biased_input", false}};
  const FlopModel from_config = make_deberta_backbone(DebertaConfig::from_json(config, "c"))->flops();
  EXPECT_EQ(from_config.relative_span, 512);
  EXPECT_EQ(from_config.relative_terms, 2);
}

TEST(Flops, FromEncoderConfig) {
  EncoderConfig c;
  c.num_layers = 6;
  c.hidden_size = 384;
  c.intermediate_size = 1536;
  c.set_num_labels(3);
  const FlopModel m = flop_model(c);
  EXPECT_EQ(m.layers, 6);
  EXPECT_EQ(m.hidden, 384);
  EXPECT_EQ(m.intermediate, 1536);
  EXPECT_EQ(m.num_labels, 3);
}

TEST(Flops, MicroBatchCountsPaddedAndRealTokens) {
  // Tiny shape for a hand count: L 1, C 2, F 4, K 2: N = 16 + 16 = 32;
  // T 4: 6·32·4 + 12·2·16 + 6·8 = 768 + 384 + 48 = 1200; T 2: 384 + 96 + 48 = 528.
  const FlopModel m{1, 2, 4, 2};
  ASSERT_DOUBLE_EQ(training_flops_per_sequence(m, 4), 1200.0);
  ASSERT_DOUBLE_EQ(training_flops_per_sequence(m, 2), 528.0);
  Batch b;
  b.size = 2;
  b.seq_len = 4;
  b.input_ids = {101, 5, 6, 102, 101, 102, 0, 0};
  b.attention_mask = {1, 1, 1, 1, 1, 1, 0, 0};
  TrainingWork w;
  w.add(m, b);
  EXPECT_EQ(w.sequences, 2);
  EXPECT_EQ(w.padded_tokens, 8);
  EXPECT_EQ(w.real_tokens, 6);
  EXPECT_DOUBLE_EQ(w.padded_flops, 2400.0);
  EXPECT_DOUBLE_EQ(w.real_flops, 1728.0);
  TrainingWork total;
  total += w;
  total += w;
  EXPECT_EQ(total.sequences, 4);
  EXPECT_DOUBLE_EQ(total.real_flops, 3456.0);
}

TEST(Flops, PeakByDeviceNameAndPrecision) {
  using P = Precision;
  auto tflops = [](const std::string& name, P p, bool tf32 = false) {
    const auto peak = peak_flops(name, p, tf32);
    return peak ? peak->flops / 1e12 : -1.0;
  };
  // Names as cudaGetDeviceProperties reports them.
  EXPECT_DOUBLE_EQ(tflops("NVIDIA H100 80GB HBM3", P::BF16), 989.5);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA H100 80GB HBM3", P::FP32, true), 494.5);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA H100 80GB HBM3", P::FP32, false), 67.0);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA H100 PCIe", P::BF16), 756.5);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA H100 NVL", P::FP16), 835.5);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA H200", P::BF16), 989.5);
  EXPECT_EQ(peak_flops("NVIDIA H200", P::BF16, false)->gpu, "H200 SXM");
  EXPECT_EQ(peak_flops("NVIDIA GH200 480GB", P::BF16, false)->gpu, "GH200");
  EXPECT_DOUBLE_EQ(tflops("NVIDIA A100-SXM4-80GB", P::BF16), 312.0);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA A100-PCIE-40GB", P::FP32, true), 156.0);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA A10", P::BF16), 125.0);  // not the A100 entry
  EXPECT_DOUBLE_EQ(tflops("NVIDIA L4", P::BF16), 121.0);   // not L40 / L40S
  EXPECT_DOUBLE_EQ(tflops("NVIDIA L40S", P::BF16), 362.05);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA GeForce RTX 4090", P::BF16), 165.2);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA GeForce RTX 3090", P::FP32, true), 35.6);
  EXPECT_DOUBLE_EQ(tflops("NVIDIA GeForce RTX 3070", P::BF16), 40.6);
  EXPECT_DOUBLE_EQ(tflops("Tesla V100-SXM2-16GB", P::FP16), 125.0);
  EXPECT_EQ(peak_flops("NVIDIA H100 80GB HBM3", P::BF16, false)->math, "bf16 tensor");
  EXPECT_EQ(peak_flops("NVIDIA A10", P::FP32, true)->math, "tf32 tensor");
  // No bf16 / TF32 on Volta and Turing; unknown GPUs and the CPU have no peak.
  EXPECT_FALSE(peak_flops("Tesla V100-SXM2-16GB", P::BF16, false));
  EXPECT_FALSE(peak_flops("Tesla T4", P::FP32, true));
  EXPECT_FALSE(peak_flops("NVIDIA A10G", P::BF16, false));
  EXPECT_FALSE(peak_flops("", P::FP32, false));
  EXPECT_FALSE(peak_flops("Some Future GPU 9000", P::BF16, false));
}

TEST(Flops, EveryTableEntryIsReachableByItsOwnName) {
  // An entry placed after a more general one would never match: each table name, as a device
  // name, must select its own entry (for a precision every entry has).
  const auto table = nlohmann::json::parse(
      std::ifstream(test::source_dir() + "/src/train/gpu_peak_flops.json"));
  ASSERT_GE(table["gpus"].size(), 15u);
  for (const auto& gpu : table["gpus"]) {
    const std::string name = gpu["name"];
    const auto peak = peak_flops("NVIDIA " + name, Precision::FP16, false);
    ASSERT_TRUE(peak) << name;
    EXPECT_EQ(peak->gpu, name);
    EXPECT_DOUBLE_EQ(peak->flops, gpu["fp16"].get<double>() * 1e12) << name;
    EXPECT_FALSE(gpu["source"].get<std::string>().empty()) << name;
    for (const char* key : {"bf16", "fp16", "tf32", "fp32"})
      EXPECT_TRUE(gpu[key].is_null() || gpu[key].get<double>() > 0) << name << " " << key;
  }
}


TEST(Flops, SummaryOnCpuHasNoMfu) {
  const FlopModel m{1, 2, 4, 2};
  Batch b;
  b.size = 2;
  b.seq_len = 4;
  b.input_ids = {101, 5, 6, 102, 101, 102, 0, 0};
  b.attention_mask = {1, 1, 1, 1, 1, 1, 0, 0};
  TrainingWork w;
  w.add(m, b);
  const auto s = flops_summary(w, 1e9, Device::cpu());
  EXPECT_DOUBLE_EQ(s["flops_per_sample"].get<double>(), 1200.0);
  EXPECT_DOUBLE_EQ(s["flops_per_sample_real"].get<double>(), 864.0);
  EXPECT_DOUBLE_EQ(s["padded_tokens_per_sample"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(s["real_tokens_per_sample"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(s["model_tflops_per_s"].get<double>(), 1200.0 * 1e9 / 1e12);
  EXPECT_TRUE(s["mfu"].is_null());
  EXPECT_EQ(s["mfu_precision"], "fp32");
  EXPECT_TRUE(flops_summary(TrainingWork{}, 0, Device::cpu()).is_null());
  // Data-parallel: the ranks' FLOP/s together, and one device's share (what its MFU divides).
  const auto two = flops_summary(w, 1e9, Device::cpu(), Precision::FP32, false, 2);
  EXPECT_DOUBLE_EQ(two["model_tflops_per_s"].get<double>(), 1200.0 * 1e9 / 1e12);
  EXPECT_DOUBLE_EQ(two["model_tflops_per_s_per_device"].get<double>(), 600.0 * 1e9 / 1e12);
  EXPECT_EQ(two["ranks"], 2);
}

TEST(Flops, TrainRunSummaryReportsFlops) {
  TempDir tmp;
  const std::string model = tmp.path() + "/tiny";
  write_tiny_bert(model);
  write_pair_task(tmp.path() + "/train.jsonl", 64, 1);
  const std::string config = tmp.path() + "/config.yaml";
  std::ofstream(config) << "model:\n  path: " << model << "\ndata:\n  train: " << tmp.path()
                        << "/train.jsonl\n  max_length: 24\ntraining:\n  max_steps: 3\n"
                        << "  batch_size: 8\n  effective_batch_size: 16\n  threads: 2\n"
                        << "output:\n  dir: " << tmp.path() << "/run\n  progress: plain\n";
  const CliResult r = run_ftune("train --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto s = nlohmann::json::parse(std::ifstream(tmp.path() + "/run/summary.json"));
  const auto tiny = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  const FlopModel m{tiny["num_hidden_layers"], tiny["hidden_size"], tiny["intermediate_size"], 2};
  // 3 steps of 16 rows, micro-batches of 8 each padded to its own longest row (<= 24).
  const double padded = s["padded_tokens_per_sample"], real = s["real_tokens_per_sample"];
  EXPECT_GT(real, 3.0);
  EXPECT_LE(real, padded);
  EXPECT_LE(padded, 24.0);
  EXPECT_NEAR(s["real_tokens_per_sample"].get<double>() * 48,
              s["train_real_tokens"].get<double>(), 1e-6);
  const double per_sample = s["flops_per_sample"];
  EXPECT_GE(per_sample, s["flops_per_sample_real"].get<double>());
  // Between the counts of the shortest and the longest possible padded length.
  EXPECT_GT(per_sample, training_flops_per_sequence(m, static_cast<int64_t>(real) - 1));
  EXPECT_LE(per_sample, training_flops_per_sequence(m, 24));
  EXPECT_NEAR(s["model_tflops_per_s"].get<double>(),
              per_sample * s["train_samples_per_s"].get<double>() / 1e12, 1e-9);
  EXPECT_TRUE(s["mfu"].is_null());  // the CPU has no peak in the table
}

}  // namespace
}  // namespace ftune::test
