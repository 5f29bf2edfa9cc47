// Query groups: rows that share a query id (data.group_field), or the rows one line of
// FlagEmbedding's nested JSONL expands into, ranked against each other by the ranking metrics
// (train/ranking_metrics.h) and the listwise loss (ops/listwise_loss.h).
//
// FlagEmbedding's format, one query a line:
//   {"query": "q", "pos": ["p1", ...], "neg": ["n1", ...], "pos_scores": [...], "neg_scores":
//   [...]}
// becomes rows (text = query, text_pair = passage) labelled "1" (pos) and "0" (neg), in the order
// pos then neg, all in one group named after the line. "neg" may be absent or empty; "pos" may not
// be empty; every entry must be a non-blank string; pos_scores / neg_scores, when present, must be
// numbers, one per passage (checked; with `teacher_scores`, a teacher's scores for
// training.loss margin_mse / distill_mse, required and each row's label instead of 1/0). A line that
// breaks a rule is a bad row (data.bad_rows) naming the line and the entry.
//
// Relevance of a row (relevance_of): labels that are integers are their value (0/1, or graded
// 0..3); other labels (["neg", "pos"]) are their id. A row is relevant when its relevance > 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/examples.h"
#include "data/readers.h"

namespace ftune::data {

// Whether a .jsonl file is FlagEmbedding's nested format: its first row is an object with a
// "query" string and a "pos" array, and no `columns.text` key.
bool looks_like_flagembedding(std::string_view content, const ColumnMap& columns);

// Expands every line of `content` (the file at `path`) into rows or one BadRow.
void read_flagembedding_jsonl(const std::string& path, std::string_view content, ReadRows* out,
                              bool teacher_scores = false);

// Sets every example's group_id: dense ids in the order the groups first appear; returns their
// number (0 when no example has a group). Examples without a group get -1.
int64_t assign_group_ids(std::vector<RawExample>& examples);

// The ranking relevance of class `id` of `labels` (see the top of this file).
float relevance_of(const LabelSet& labels, int32_t id);

// Relevance by a group's top score (training.loss margin_mse, whose column is a teacher's score):
// 1 for the row of each group with the highest target (the first of ties), 0 for the others and
// for rows without a group.
std::vector<float> top_target_relevance(const std::vector<RawExample>& examples,
                                        const std::vector<float>& targets);

struct GroupStats {
  int64_t groups = 0;
  int64_t without_positive = 0;             // groups where no row is relevant
  int64_t first_without_positive_line = 0;  // a line of the first such group
  int64_t smallest = 0, largest = 0;        // rows in a group
};
// Over examples with their relevance (group_id set by assign_group_ids).
GroupStats group_stats(const std::vector<RawExample>& examples,
                       const std::vector<float>& relevance);

}  // namespace ftune::data
