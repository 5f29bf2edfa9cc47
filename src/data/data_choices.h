// The data keys' closed choices as enums with their words (core/choice.h), in a header light
// enough for the training config to hold them: data.format and data.bad_rows.
#pragma once

#include "core/choice.h"

namespace ftune::data {

// kFlagEmbedding: FlagEmbedding's nested JSONL ({"query", "pos": [...], "neg": [...]}), each line
// a query group expanded into rows (data/groups.h).
enum class DataFormat { kAuto, kJsonl, kTsv, kCsv, kFlagEmbedding };
constexpr ChoiceNames<DataFormat, 5> kDataFormatNames{
    {{DataFormat::kAuto, "auto"},
     {DataFormat::kJsonl, "jsonl"},
     {DataFormat::kTsv, "tsv"},
     {DataFormat::kCsv, "csv"},
     {DataFormat::kFlagEmbedding, "flagembedding"}}};
constexpr const ChoiceNames<DataFormat, 5>& choice_names(DataFormat) {
  return kDataFormatNames;
}

enum class BadRowPolicy {
  kFail,  // any bad row is an error listing the first rows and the count
  kSkip,  // bad rows are dropped and counted, up to max_bad_fraction of the rows
};
constexpr ChoiceNames<BadRowPolicy, 2> kBadRowPolicyNames{
    {{BadRowPolicy::kFail, "fail"}, {BadRowPolicy::kSkip, "skip"}}};
constexpr const ChoiceNames<BadRowPolicy, 2>& choice_names(BadRowPolicy) {
  return kBadRowPolicyNames;
}

}  // namespace ftune::data
