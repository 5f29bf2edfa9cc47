// The data-parallel pieces that need no second process: each rank's rows of a step batch, the
// layer a parameter's name puts it in, and the reduction buckets (contiguous, covering the whole
// gradient buffer, layer and non-layer parameters apart, started higher layers first).
#include <gtest/gtest.h>

#include "train/gradient_reducer.h"

namespace ftune {
namespace {

TEST(DataParallelRows, ContiguousAndCovering) {
  for (int64_t rows : {0, 1, 5, 8, 61})
    for (int size : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const auto [b, e] = rank_rows(rows, r, size);
        EXPECT_EQ(b, next);
        EXPECT_LE(e - b, (rows + size - 1) / size);
        next = e;
      }
      EXPECT_EQ(next, rows);
    }
  EXPECT_EQ(rank_rows(5, 0, 2), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(rank_rows(5, 1, 2), (std::pair<int64_t, int64_t>{2, 5}));
}

TEST(DataParallelBuckets, LayerOfAName) {
  EXPECT_EQ(param_layer("bert.encoder.layer.11.attention.self.query.weight"), 11);
  EXPECT_EQ(param_layer("model.layers.3.mlp.up_proj.weight"), 3);
  EXPECT_EQ(param_layer("base_model.model.deberta.encoder.layer.0.attention.self.query_proj.lora_A.weight"), 0);
  EXPECT_EQ(param_layer("bert.embeddings.word_embeddings.weight"), -1);
  EXPECT_EQ(param_layer("deberta.encoder.rel_embeddings.weight"), -1);
  EXPECT_EQ(param_layer("classifier.weight"), -1);
  EXPECT_EQ(param_layer("model.player.2.weight"), -1);  // not a layer list
}

TEST(DataParallelBuckets, ContiguousCoveringOrdered) {
  ParamTable t;
  t.add("emb.word.weight", Shape{100, 4});                  // [0, 400)
  for (int l = 0; l < 3; ++l) {
    t.add("enc.layer." + std::to_string(l) + ".w", Shape{10, 10});  // 100 each
    t.add("enc.layer." + std::to_string(l) + ".b", Shape{10});      // 10 each
  }
  t.add("enc.rel_embeddings.weight", Shape{5, 4});  // after the layers, final only at the end
  t.add("classifier.weight", Shape{2, 4});
  const std::vector<ReduceBucket> buckets = plan_buckets(t, 150);
  // Covering [0, total) exactly once.
  std::vector<int> seen(static_cast<size_t>(t.total()), 0);
  for (const ReduceBucket& b : buckets)
    for (int64_t i = b.begin; i < b.end; ++i) ++seen[static_cast<size_t>(i)];
  for (int x : seen) EXPECT_EQ(x, 1);
  // Layer buckets first, by descending stage; no bucket mixes layer and non-layer parameters.
  int64_t last_stage = 1 << 30;
  for (const ReduceBucket& b : buckets) {
    EXPECT_LE(b.stage, last_stage);
    last_stage = b.stage;
    EXPECT_LE(b.end - b.begin, std::max<int64_t>(150, 400));
    for (const ParamSpec& s : t.specs()) {
      const int64_t e = s.offset + s.shape.numel();
      if (s.offset < b.end && e > b.begin) {
        EXPECT_EQ(param_layer(s.name) >= 0, b.stage >= 0) << s.name;
        if (b.stage >= 0) EXPECT_GE(param_layer(s.name), b.stage) << s.name;
      }
    }
  }
  // From the end: layer 2's weight and bias with layer 1's bias (120 elements; its weight would
  // pass 150), final once layer 1 is done, then the rest of layer 1 with layer 0's bias, layer
  // 0's weight; the head with the shared table, and the embeddings, at the end.
  ASSERT_EQ(buckets.size(), 5u);
  EXPECT_EQ(buckets[0].stage, 1);
  EXPECT_EQ(buckets[0].end - buckets[0].begin, 120);
  EXPECT_EQ(buckets[1].stage, 0);
  EXPECT_EQ(buckets[2].stage, 0);
  EXPECT_EQ(buckets[3].begin, 730);  // rel_embeddings and classifier
  EXPECT_EQ(buckets[4].begin, 0);    // embeddings
  EXPECT_EQ(buckets[4].stage, -1);
}

}  // namespace
}  // namespace ftune
