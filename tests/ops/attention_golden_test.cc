// The attention op against transformers itself (tests/fixtures/attention, written by
// tools/make_attention_fixtures.py): each case is a model family's eager attention (its module's
// scaling, soft-cap and kv grouping, its masking_utils mask: causal, sliding window, Gemma 3's
// bidirectional window, ModernBERT's local window, packed rows through position_ids) or torch's
// scaled_dot_product_attention for BERT, with torch autograd's gradients. The window comes from
// the HF config key through the op's own mapping (hf_sliding_window, ...), so the mapping is
// checked against the masks transformers builds. Runs on every device present.
#include <nlohmann/json.hpp>

#include <string>

#include "io/safetensors.h"
#include "op_test_util.h"
#include "ops/attention.h"

namespace ftune::test {
namespace {

class AttentionGoldenTest : public OpTest {};

TEST_P(AttentionGoldenTest, MatchesTransformersForEveryFamily) {
  const auto file =
      io::SafetensorsFile::open(fixtures_dir() + "/attention/attention_cases.safetensors");
  const auto cases = nlohmann::json::parse(file.metadata().at("cases"));
  ASSERT_EQ(cases.size(), 8u);
  for (const auto& cs : cases) {
    const std::string name = cs.at("name");
    SCOPED_TRACE(name);
    auto host = [&](const std::string& t) { return file.read(name + "." + t); };
    auto on_device = [&](const std::string& t) { return to_device(host(t), device()); };
    AttentionSpec s;
    s.heads = cs.at("heads");
    s.kv_heads = cs.at("kv_heads");
    s.head_dim = cs.at("head_dim");
    s.causal = cs.at("causal");
    s.softcap = cs.at("softcap");
    s.scale = cs.at("scale").is_null() ? default_attention_scale(s.head_dim)
                                       : float(cs.at("scale").get<double>());
    if (cs.contains("sliding_window")) s.window = hf_sliding_window(cs.at("sliding_window"));
    if (cs.contains("bidirectional_sliding_window"))
      s.window = hf_bidirectional_sliding_window(cs.at("bidirectional_sliding_window"));
    if (cs.contains("local_attention")) s.window = hf_local_attention(cs.at("local_attention"));
    const bool packed = cs.at("layout") == "packed";
    const int64_t B = cs.at("batch"), T = cs.at("max_seq");
    auto q = on_device("q"), k = on_device("k"), v = on_device("v"), dout = on_device("dout");
    const int64_t N = q.view().dim(0);
    auto cu = packed ? on_device("cu_seqlens") : zeros({1}, device(), DType::I32);
    auto mask = packed ? zeros({1}, device(), DType::I32) : on_device("key_mask");
    AttentionCall c;
    c.spec = s;
    c.rows = {B, T, packed ? cu.view() : TensorView(), packed ? TensorView() : mask.view()};
    const AttentionBuffers need = attention_buffers(s, device(), false, B, N, T, true);
    auto saved = poisoned({need.saved}, device());
    auto ws = zeros({std::max<int64_t>(need.workspace, 1)}, device());
    c.workspace = ws.view();
    auto out = poisoned({N, s.heads * s.head_dim}, device());
    auto dq = poisoned(q.view().shape, device()), dk = poisoned(k.view().shape, device()),
         dv = poisoned(v.view().shape, device());
    attention_forward(c, out.view(), saved.view(), q.view(), k.view(), v.view());
    attention_backward(c, dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(),
                       v.view(), out.view(), saved.view());
    auto want = [&](const std::string& t) { return host(t); };
    EXPECT_LE(max_rel_error(out.view(), want("out").view()), 2e-5) << "out";
    EXPECT_LE(max_rel_error(dq.view(), want("dq").view()), 5e-5) << "dq";
    EXPECT_LE(max_rel_error(dk.view(), want("dk").view()), 5e-5) << "dk";
    EXPECT_LE(max_rel_error(dv.view(), want("dv").view()), 5e-5) << "dv";
  }
}

FTUNE_INSTANTIATE_DEVICES(AttentionGoldenTest);

}  // namespace
}  // namespace ftune::test
