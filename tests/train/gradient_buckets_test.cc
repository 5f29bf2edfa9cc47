// The data-parallel pieces that need no second process: each rank's rows of a step batch, the
// layer a parameter's name puts it in, the reduction buckets (contiguous, covering the whole
// gradient buffer, layer and non-layer parameters apart, started higher layers first), when a
// real backward pass starts each bucket (the schedule the MPI and NCCL transports share, seen
// through a recording transport), and the ranks' verdict on a step where one failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/memory.h"
#include "dist/gradient_reducer.h"
#include "models/hf_checkpoint.h"
#include "models/sequence_classifier.h"
#include "test_util.h"
#include "tiny_model.h"

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

// Listwise / margin_mse step batches are consecutive groups: every rank's rows are whole groups,
// the ranks differ by at most one group, and together they cover the step batch.
TEST(DataParallelRows, WholeGroupsPerRank) {
  for (int64_t group : {2, 4, 8})
    for (int64_t groups : {0, 1, 3, 5, 16})
      for (int size : {1, 2, 3, 8}) {
        int64_t next = 0;
        for (int r = 0; r < size; ++r) {
          const auto [b, e] = rank_rows(groups * group, r, size, group);
          EXPECT_EQ(b, next);
          EXPECT_EQ(b % group, 0) << b;
          EXPECT_EQ(e % group, 0) << e;
          EXPECT_LE(e - b, (groups + size - 1) / size * group);
          next = e;
        }
        EXPECT_EQ(next, groups * group);
      }
  // 3 groups of 4 over 2 ranks: 1 and 2 groups, where halving the rows would cut group 2.
  EXPECT_EQ(rank_rows(12, 0, 2, 4), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(rank_rows(12, 1, 2, 4), (std::pair<int64_t, int64_t>{4, 12}));
}

TEST(DataParallelBuckets, LayerOfAName) {
  EXPECT_EQ(param_layer("bert.encoder.layer.11.attention.self.query.weight"), 11);
  EXPECT_EQ(param_layer("model.layers.3.mlp.up_proj.weight"), 3);
  EXPECT_EQ(param_layer(
                "base_model.model.deberta.encoder.layer.0.attention.self.query_proj.lora_A.weight"),
            0);
  EXPECT_EQ(param_layer("bert.embeddings.word_embeddings.weight"), -1);
  EXPECT_EQ(param_layer("deberta.encoder.rel_embeddings.weight"), -1);
  EXPECT_EQ(param_layer("classifier.weight"), -1);
  EXPECT_EQ(param_layer("model.player.2.weight"), -1);  // not a layer list
}

TEST(DataParallelBuckets, ContiguousCoveringOrdered) {
  ParamTable t;
  t.add("emb.word.weight", Shape{100, 4});  // [0, 400)
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

// What a transport was asked to do, in order, next to the layers backward finished: "layer L",
// "start I" (with a copy of the bucket's values when started), "join", "loss".
struct Recorder : ReduceTransport, GradientReadyListener {
  std::vector<std::string> events;
  std::vector<std::vector<float>> started;  // by bucket index
  GradientReducer* reducer = nullptr;

  void start(size_t index, float* data, int64_t n) override {
    events.push_back("start " + std::to_string(index));
    if (started.size() <= index) started.resize(index + 1);
    started[index].assign(data, data + n);
  }
  void join() override { events.push_back("join"); }
  void sum_step_loss(double*) override { events.push_back("loss"); }
  const char* name() const override { return "recorder"; }
  // Between the backward and the reducer: logs each finished layer, then lets the reducer start.
  void layer_done(int64_t layer) override {
    events.push_back("layer " + std::to_string(layer));
    reducer->layer_done(layer);
  }
};

// A real backward of a 2-layer BERT with buckets of ~2.5k elements (a layer is ~8.5k): each
// layer's buckets start right after that layer's backward and before the next layer's, with
// their final values (the gradients do not change after the start); the non-layer buckets start
// once backward has returned; the transport joins before the step loss is summed.
TEST(DataParallelBuckets, RealBackwardStartsEachBucketOnceItsLayerIsDone) {
  test::TempDir tmp;
  test::write_tiny_bert(tmp.path() + "/tiny");
  ClassifierOptions o;
  o.max_batch = 2;
  o.max_seq = 8;
  SequenceClassifier clf(load_model_spec(tmp.path() + "/tiny").with_labels({"0", "1"}), o);
  ArenaPlan plan;
  clf.add_to_plan(plan);
  Arena arena(Device::cpu(), std::move(plan));
  clf.bind(arena);
  load_model_weights(clf, tmp.path() + "/tiny");
  Batch b;
  b.size = 2;
  b.seq_len = 8;
  b.input_ids = {101, 7592, 2088, 2003, 2204, 102, 0, 0, 101, 2919, 2154, 102, 0, 0, 0, 0};
  b.attention_mask = {1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
  b.labels = {1, 0};
  clf.set_batch(b);

  auto owned = std::make_unique<Recorder>();
  Recorder& rec = *owned;
  GradientReducer reducer(ProcessGroup::world(), std::move(owned), 0.01);
  rec.reducer = &reducer;
  reducer.plan(clf.trainable_params(), clf.trainable_grads());
  const std::vector<ReduceBucket>& buckets = reducer.buckets();
  ASSERT_GE(buckets.size(), 5u);

  clf.zero_grad();
  const DropoutPlan d{true, 5, 0};
  clf.forward(d);
  clf.loss({});
  reducer.arm();
  set_gradient_listener(&rec);  // the recorder forwards to the reducer
  clf.backward(d);
  rec.events.push_back("backward returned");
  double loss = 0;
  reducer.finish(&loss);

  // Where each event happened.
  const auto at = [&](const std::string& e) {
    const auto it = std::find(rec.events.begin(), rec.events.end(), e);
    EXPECT_NE(it, rec.events.end()) << e;
    return it - rec.events.begin();
  };
  const auto returned = at("backward returned");
  const std::vector<float> final_grads = test::to_vector(clf.trainable_grads());
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto started = at("start " + std::to_string(i));
    if (i > 0) EXPECT_GT(started, at("start " + std::to_string(i - 1)));  // in the plan's order
    if (buckets[i].stage >= 0) {
      EXPECT_GT(started, at("layer " + std::to_string(buckets[i].stage))) << i;
      if (buckets[i].stage > 0)  // before the layer below has finished: overlapped
        EXPECT_LT(started, at("layer " + std::to_string(buckets[i].stage - 1))) << i;
      EXPECT_LT(started, returned) << i;
    } else {
      EXPECT_GT(started, returned) << i;
    }
    // Started with the final gradients.
    const std::vector<float> final_values(final_grads.begin() + buckets[i].begin,
                                          final_grads.begin() + buckets[i].end);
    EXPECT_EQ(rec.started[i], final_values) << "bucket " << i << " changed after it started";
  }
  EXPECT_GT(at("join"), at("start " + std::to_string(buckets.size() - 1)));
  EXPECT_GT(at("loss"), at("join"));
  EXPECT_EQ(reducer.report()["buckets_started_in_backward"].get<int64_t>(),
            std::count_if(buckets.begin(), buckets.end(),
                          [](const ReduceBucket& x) { return x.stage >= 0; }));
}

TEST(DataParallelVerdict, FallBackOnlyWhenEveryFailureIsOutOfMemoryAndEveryRankCanHalve) {
  using K = RankFailure;
  EXPECT_EQ(judge_step({K::kNone, K::kNone}, 1).kind, StepVerdict::kOk);  // nothing failed
  StepVerdict v = judge_step({K::kNone, K::kOutOfMemory, K::kOutOfMemory}, 0);
  EXPECT_EQ(v.kind, StepVerdict::kFallBack);
  EXPECT_EQ(v.first, 1);
  v = judge_step({K::kNone, K::kOutOfMemory}, 1);  // a rank at micro-batch 1
  EXPECT_EQ(v.kind, StepVerdict::kStop);
  EXPECT_TRUE(v.out_of_memory);
  v = judge_step({K::kError, K::kOutOfMemory}, 0);
  EXPECT_EQ(v.kind, StepVerdict::kStop);
  EXPECT_EQ(v.first, 0);
  EXPECT_FALSE(v.out_of_memory);
}

}  // namespace
}  // namespace ftune
