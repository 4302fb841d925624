//===- PlanVerifier.cpp - Everything a backend relies on, checked once ----===//
//
// A plan is input like any other: it comes from a file or a cache that may
// be truncated, corrupted or written by hand. The loader has parsed it with
// every integer an integer in its range (Plan.cpp); this checks what the
// backends then rely on without checking again:
//
//   - values: inputs and constants as the runtime feeds them, states in f32
//     and initialised once, arena buffers inside the arena;
//   - steps: arity and attributes from the op table (plan/Format.h), dtypes
//     and shapes from the op rules (PlanOpRules.cpp), results that are
//     theirs to write;
//   - dataflow: every arena value written before it is read in its entry,
//     every collective waited for once and its buffers left alone meanwhile;
//   - memory: no two arena values live at the same time share a byte, with
//     liveness computed from the plan's own steps;
//   - entries and their outputs, and the vocabulary.
//
// Each problem is one line naming the entry, the step and the field.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace kiln::runtime {

namespace {

/// A problem with `where` (an entry, a step, a value or a field).
Error fail(const std::string &where, const std::string &what) {
  return Error(where + ": " + what);
}

std::string stepName(const std::string &entry, size_t i, const PlanStep &s) {
  std::string text = entry + " step " + std::to_string(i) + " (" + s.op;
  if (!s.loc.empty())
    text += " at " + s.loc;
  return text + ")";
}

/// A tensor-parallel slice (`tp_shard`) of `what`, whose shape is `shape`:
/// its dim is one of the shape's, its index the plan's one tp position on
/// a mesh with tp > 1, its pad below the slice's length along the dim, and
/// the whole tensor (the slice's dim times tp) has at most 2^48 elements.
Error checkTpSlice(const Plan &plan, const std::optional<TpSlice> &slice,
                   const std::vector<int64_t> &shape, const std::string &what) {
  if (!slice)
    return Error::success();
  if (plan.mesh.tp == 1)
    return Error(what + " is a tp slice (tp_shard), but the mesh has tp 1");
  if (slice->dim >= static_cast<int64_t>(shape.size()))
    return Error(what + " tp_shard dim " + std::to_string(slice->dim) +
                 " is not a dim of its rank-" + std::to_string(shape.size()) +
                 " shape");
  if (slice->pad >= shape[slice->dim])
    return Error(what + " tp_shard pad " + std::to_string(slice->pad) +
                 " is not below the slice's " +
                 std::to_string(shape[slice->dim]) + " entries along dim " +
                 std::to_string(slice->dim) +
                 " (a slice would be padding only)");
  if (slice->index != plan.tpIndex)
    return Error(what + " is tp slice " + std::to_string(slice->index) +
                 " in a plan for tp position " + std::to_string(plan.tpIndex) +
                 " (a plan holds one position's slices)");
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d; // the shapes' element counts are checked to be at most 2^48
  if (n > plan::kMaxElements / plan.mesh.tp)
    return Error(what + " is a tp slice of a tensor of more than 2^48 "
                        "elements");
  return Error::success();
}

/// Inputs as the trainer and the sampler feed them; constants as one f32;
/// states in f32 (every backend keeps state in f32); arena values inside
/// the arena; the state bytes the plan states.
Error checkValues(const Plan &plan) {
  const PlanValue *tokens = plan.named(PlanValue::Input, "tokens");
  int64_t stateBytes = 0;
  std::set<std::pair<int, std::string>> names;
  for (const PlanValue &v : plan.values) {
    std::string where = "value " + std::to_string(v.id);
    if ((v.kind == PlanValue::State || v.kind == PlanValue::Input) &&
        !names.insert({v.kind, v.name}).second)
      return fail(where, "'" + v.name + "' is declared twice");
    if (Error e = checkTpSlice(plan, v.tp, v.shape, "'" + v.name + "'"))
      return fail(where, e.message());
    switch (v.kind) {
    case PlanValue::Input: {
      const auto &known = plan::kInputs;
      if (std::find_if(std::begin(known), std::end(known), [&](const char *n) {
            return v.name == n;
          }) == std::end(known))
        return fail(where, "is an unknown input '" + v.name +
                               "' (inputs are tokens, targets, step and seed)");
      bool ids = v.name == "tokens" || v.name == "targets";
      DType want = ids ? DType::I32 : DType::I64;
      if (v.dtype != want)
        return fail(where, "input '" + v.name + "' must be " + dtypeName(want));
      if (!ids && !v.shape.empty())
        return fail(where, "input '" + v.name + "' must be a scalar");
      if (ids && (v.shape.size() != 2 || v.numElements() == 0))
        return fail(where, "input '" + v.name +
                               "' must be a non-empty [batch, seq] tensor");
      if (v.name == "targets" && tokens && v.shape != tokens->shape)
        return fail(where, "input 'targets' must have the shape of 'tokens'");
      // Under tp every rank feeds its sequence slice (the trainer cuts it).
      if (ids && plan.mesh.tp > 1 && (!v.tp || v.tp->dim != 1 || v.tp->pad))
        return fail(where, "input '" + v.name +
                               "' must be a sequence slice (tp_shard dim 1, "
                               "no pad) on a mesh with tp > 1");
      break;
    }
    case PlanValue::Const:
      if (!v.shape.empty() || v.dtype != DType::F32)
        return fail(where, "a constant must be an f32 scalar");
      break;
    case PlanValue::State:
      if (v.dtype != DType::F32)
        return fail(where, "state '" + v.name + "' is " + dtypeName(v.dtype) +
                               "; state is kept in f32");
      // Each state is at most 2^51 bytes: the sum cannot overflow before
      // it passes 2^62.
      stateBytes += v.bytes();
      if (stateBytes > plan::kMaxBytes)
        return fail(where, "the states hold more than 2^62 bytes");
      if (!v.shardOf.empty()) {
        if (v.tp)
          return fail(where, "a flat shard is no tp slice (its parts say "
                             "theirs)");
        if (v.shape.size() != 1)
          return fail(where, "a sharded state must be a flat [numel] shard");
        for (const ShardPart &p : v.shardOf) {
          int64_t n = p.numElements();
          // offset and n are at most 2^48; the flat buffer holds one
          // shard per dp_shard rank: compare without forming the product.
          int64_t end = p.offset + n, shard = v.shape[0];
          int64_t shards = plan.mesh.dpShard;
          if (shard == 0 ? end > 0 : (end + shard - 1) / shard > shards)
            return fail(where, "part '" + p.name +
                                   "' lies outside the flat buffer of " +
                                   std::to_string(shards) + " shards");
          if (Error e =
                  checkTpSlice(plan, p.tp, p.shape, "part '" + p.name + "'"))
            return fail(where, e.message());
        }
      }
      break;
    case PlanValue::Arena:
      // Buffers are 64-byte aligned (docs/plan.md), so that every backend's
      // loads of any dtype are aligned.
      if (v.offset % 64 != 0)
        return fail(where, "arena offset " + std::to_string(v.offset) +
                               " is not a multiple of 64");
      // offset <= 2^62 and bytes <= 2^51: the sum cannot overflow.
      if (v.offset + v.bytes() > plan.arenaBytes)
        return fail(where, "bytes [" + std::to_string(v.offset) + ", " +
                               std::to_string(v.offset + v.bytes()) +
                               ") lie outside the arena of " +
                               std::to_string(plan.arenaBytes) + " bytes");
      break;
    }
  }
  if (stateBytes != plan.stateBytes)
    return fail("the plan",
                "state_bytes is " + std::to_string(plan.stateBytes) +
                    " but its states hold " + std::to_string(stateBytes));
  // What one rank holds, summed by the memory check (MemoryCheck.h) with
  // the backend's own buffers: at most 2^62 bytes, so that never overflows.
  if (plan.stateBytes > plan::kMaxBytes - plan.arenaBytes)
    return fail("the plan", "state_bytes and arena_bytes together pass 2^62");
  return Error::success();
}

/// Every attribute known to the op's table entry, of its type and in its
/// range; every required one present.
Error checkAttributes(const PlanStep &s, const std::string &where) {
  for (const auto &[name, value] : s.attrs) {
    std::string what = "attribute '" + name + "'";
    if (name.rfind(plan::kAnnotationPrefix.data(), 0) == 0) {
      if (!std::holds_alternative<bool>(value) &&
          !std::holds_alternative<std::string>(value))
        return fail(where, what + " is an annotation: a boolean or a string");
      continue;
    }
    const plan::AttrSpec *spec = plan::findAttr(s.kind, name);
    if (!spec)
      return fail(where, what + " is not one " + s.op + " takes");
    bool typed = false;
    std::vector<double> numbers;
    switch (spec->type) {
    case plan::AttrType::Bool:
      typed = std::holds_alternative<bool>(value);
      break;
    case plan::AttrType::Int:
      if (auto *i = std::get_if<int64_t>(&value)) {
        typed = true;
        numbers.push_back(static_cast<double>(*i));
      }
      break;
    case plan::AttrType::Float:
      if (auto *i = std::get_if<int64_t>(&value)) {
        typed = true;
        numbers.push_back(static_cast<double>(*i));
      } else if (auto *d = std::get_if<double>(&value)) {
        typed = true;
        numbers.push_back(*d);
      }
      break;
    case plan::AttrType::String:
      if (auto *text = std::get_if<std::string>(&value)) {
        typed = true;
        if (!plan::allowedString(*spec, *text))
          return fail(where, what + " is '" + *text + "'; it must be one of " +
                                 spec->oneOf);
      }
      break;
    case plan::AttrType::IntList:
      if (auto *list = std::get_if<std::vector<int64_t>>(&value)) {
        typed = true;
        for (int64_t i : *list)
          numbers.push_back(static_cast<double>(i));
      }
      break;
    }
    if (!typed)
      return fail(where, what + " must be " + plan::attrTypeName(spec->type));
    for (double x : numbers)
      if (!(x >= spec->min && x <= spec->max))
        return fail(where, what + " holds " + std::to_string(x) +
                               ", outside [" + std::to_string(spec->min) +
                               ", " + std::to_string(spec->max) + "]");
  }
  for (const plan::AttrSpec &spec : plan::kAttrs)
    if (spec.op == s.kind && spec.required && !s.attrs.count(spec.name))
      return fail(where,
                  std::string("attribute '") + spec.name + "' is missing");
  return Error::success();
}

/// Arity from the table, then the op's own rules.
Error checkStep(const Plan &plan, const PlanStep &s, const std::string &where) {
  const plan::OpInfo &info = plan::info(s.kind);
  int operands = static_cast<int>(s.operands.size());
  int results = static_cast<int>(s.results.size());
  if (operands < info.minOperands ||
      (info.maxOperands >= 0 && operands > info.maxOperands))
    return fail(where, "has " + std::to_string(operands) + " operands; " +
                           s.op + " takes " +
                           (info.maxOperands == info.minOperands
                                ? std::to_string(info.minOperands)
                            : info.maxOperands < 0
                                ? "at least " + std::to_string(info.minOperands)
                                : std::to_string(info.minOperands) + " to " +
                                      std::to_string(info.maxOperands)));
  if (s.kind == plan::Op::Fused ? results < 1 : results != info.results)
    return fail(where, "has " + std::to_string(results) + " results; " + s.op +
                           " gives " + std::to_string(info.results));
  if ((s.kind == plan::Op::Fused) != static_cast<bool>(s.group))
    return fail(where, "a fused step needs its group");
  if (Error e = checkAttributes(s, where))
    return e;
  if (Error e = checkStepShapes(plan, s))
    return fail(where, e.message());
  return Error::success();
}

/// Whether two values' storage overlaps: the same value, or arena values
/// sharing a byte.
bool overlaps(const PlanValue &a, const PlanValue &b) {
  if (a.id == b.id)
    return true;
  if (a.kind != PlanValue::Arena || b.kind != PlanValue::Arena)
    return false;
  return a.offset < b.offset + b.bytes() && b.offset < a.offset + a.bytes() &&
         a.bytes() > 0 && b.bytes() > 0;
}

/// Results are the step's to write: arena buffers (states only for the ops
/// that update state in place), never sharing storage with each other or
/// with an operand (but for the in-place updates).
Error checkResults(const Plan &plan, const PlanStep &s,
                   const std::string &where) {
  bool updatesState = s.kind == plan::Op::Init || s.kind == plan::Op::AdamW ||
                      s.kind == plan::Op::AmaxHistoryUpdate;
  for (size_t r = 0; r < s.results.size(); ++r) {
    const PlanValue &v = plan.values[s.results[r]];
    std::string what = "result " + std::to_string(r) + " (value " +
                       std::to_string(v.id) + ")";
    if (v.viewOf >= 0)
      return fail(where, what + " is a view of value " +
                             std::to_string(v.viewOf) +
                             ", which no step writes");
    if (v.kind == PlanValue::Input || v.kind == PlanValue::Const ||
        (v.kind == PlanValue::State && !updatesState))
      return fail(where, what + " is " +
                             (v.kind == PlanValue::Input   ? "an input"
                              : v.kind == PlanValue::Const ? "a constant"
                                                           : "a state") +
                             ", which " + s.op + " cannot write");
    if (s.kind == plan::Op::Wait)
      continue; // the collective's own buffer (checkStepShapes)
    for (size_t o = r + 1; o < s.results.size(); ++o)
      if (overlaps(v, plan.values[s.results[o]]))
        return fail(where,
                    what + " shares storage with result " + std::to_string(o));
    for (size_t o = 0; o < s.operands.size(); ++o) {
      // AdamW's results are its operands 0, 2, 3; a history update may
      // write over its history.
      bool inPlace =
          (s.kind == plan::Op::AdamW &&
           o == (r == 0 ? 0u : r + 1)) ||
          (s.kind == plan::Op::AmaxHistoryUpdate && o == 0);
      if (inPlace && s.results[r] == s.operands[o])
        continue;
      if (overlaps(v, plan.values[s.operands[o]]))
        return fail(where, what + " shares storage with operand " +
                               std::to_string(o) + " (value " +
                               std::to_string(s.operands[o]) + ")");
    }
  }
  return Error::success();
}

/// When an arena value is live in one entry: from the step that first
/// writes it to its last reader, a collective's wait, or the entry's end
/// for an output.
struct Live {
  int64_t first = -1, last = -1;
};

/// Dataflow and memory of one entry: arena values written before they are
/// read; collectives waited for once, their buffers untouched until then;
/// no two values live at once sharing arena bytes.
Error checkEntry(const Plan &plan, const std::string &name,
                 const PlanEntry &entry) {
  std::map<int64_t, Live> live;
  // Collectives in flight: the started result -> (its step, its operand).
  std::map<int64_t, std::pair<size_t, int64_t>> inFlight;
  auto isArena = [&](int64_t id) {
    return plan.values[id].kind == PlanValue::Arena;
  };
  // The collective in flight whose result (or, with `operandToo`, whose
  // operand) shares storage with value `id`: its step, or -1.
  auto inFlightOn = [&](int64_t id, bool operandToo) -> int64_t {
    for (const auto &[result, started] : inFlight)
      if (overlaps(plan.values[id], plan.values[result]) ||
          (operandToo &&
           overlaps(plan.values[id], plan.values[started.second])))
        return static_cast<int64_t>(started.first);
    return -1;
  };
  const int64_t end = static_cast<int64_t>(entry.steps.size());
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    const PlanStep &s = entry.steps[i];
    std::string where = stepName(name, i, s);
    bool wait = s.kind == plan::Op::Wait;
    for (size_t o = 0; o < s.operands.size(); ++o) {
      int64_t id = s.operands[o];
      if (wait) {
        auto it = inFlight.find(id);
        if (it == inFlight.end())
          return fail(where,
                      "operand 0 (value " + std::to_string(id) +
                          ") is not the result of a collective in flight");
        live[it->second.second].last = static_cast<int64_t>(i);
        live[id].last = static_cast<int64_t>(i);
        inFlight.erase(it);
        continue;
      }
      const PlanValue &v = plan.values[id];
      if (v.kind == PlanValue::Input &&
          ((v.name == "seed") != (s.kind == plan::Op::Init) ||
           (v.name == "targets" && name == "logits")))
        return fail(where, "operand " + std::to_string(o) + " is the input '" +
                               v.name + "', which " + name + " does not feed " +
                               s.op);
      if (!isArena(id))
        continue;
      // A view is read where its buffer is.
      auto it = live.find(v.storage());
      if (it == live.end())
        return fail(where, "operand " + std::to_string(o) + " (value " +
                               std::to_string(id) +
                               ") is read before any step of " + name +
                               " writes it");
      if (int64_t started = inFlightOn(id, false); started >= 0)
        return fail(where, "operand " + std::to_string(o) + " (value " +
                               std::to_string(id) +
                               ") is read before the wait of " +
                               "the collective of step " +
                               std::to_string(started) + " that writes it");
      it->second.last = static_cast<int64_t>(i);
    }
    if (wait)
      continue;
    for (size_t r = 0; r < s.results.size(); ++r) {
      int64_t id = s.results[r];
      if (int64_t started = inFlightOn(id, true); started >= 0)
        return fail(where, "result " + std::to_string(r) + " (value " +
                               std::to_string(id) +
                               ") overwrites a buffer of the " +
                               "collective of step " + std::to_string(started) +
                               " before its wait");
      if (!isArena(id))
        continue;
      Live &l = live[id];
      if (l.first < 0)
        l.first = static_cast<int64_t>(i);
      l.last = std::max(l.last, static_cast<int64_t>(i));
    }
    // A receive (pipe_recv_start) has no operand: its buffer is its result.
    if (plan::category(s.kind) == plan::Category::Collective)
      inFlight[s.results[0]] = {i, s.operands.empty()
                                       ? s.results[0]
                                       : plan.values[s.operands[0]].storage()};
  }
  if (!inFlight.empty())
    return fail(stepName(name, inFlight.begin()->second.first,
                         entry.steps[inFlight.begin()->second.first]),
                "the collective is never waited for");
  for (const auto &[out, id] : entry.outputs) {
    if (!isArena(id))
      continue;
    auto it = live.find(plan.values[id].storage());
    if (it == live.end())
      return fail(name + " output '" + out + "'",
                  "value " + std::to_string(id) + " is never written by " +
                      name);
    it->second.last = end;
  }

  // Sweep the steps in order: buffers become live at their first write and
  // stay so to their last use (both inclusive). The live buffers never
  // overlap (each was checked when it became live), so a new one need only
  // be checked against its neighbours by offset.
  std::vector<std::pair<Live, int64_t>> byStart;
  for (const auto &[id, l] : live)
    byStart.push_back({l, id});
  std::sort(byStart.begin(), byStart.end(), [](const auto &a, const auto &b) {
    return a.first.first < b.first.first ||
           (a.first.first == b.first.first && a.second < b.second);
  });
  std::multimap<int64_t, int64_t> endsAt; // last step -> id
  std::map<int64_t, int64_t> byOffset;    // offset -> id, live, non-empty
  for (const auto &[l, id] : byStart) {
    while (!endsAt.empty() && endsAt.begin()->first < l.first) {
      byOffset.erase(plan.values[endsAt.begin()->second].offset);
      endsAt.erase(endsAt.begin());
    }
    const PlanValue &v = plan.values[id];
    if (v.bytes() == 0)
      continue;
    auto next = byOffset.lower_bound(v.offset);
    auto clash = [&](std::map<int64_t, int64_t>::iterator it) {
      if (it == byOffset.end() || !overlaps(v, plan.values[it->second]))
        return Error::success();
      const Live &other = live.at(it->second);
      return fail(stepName(name, l.first, entry.steps[l.first]),
                  "value " + std::to_string(id) + " (arena bytes " +
                      std::to_string(v.offset) + " to " +
                      std::to_string(v.offset + v.bytes()) +
                      ") overlaps value " + std::to_string(it->second) +
                      ", live from step " + std::to_string(other.first) +
                      " to " + std::to_string(other.last));
    };
    if (Error e = clash(next))
      return e;
    if (next != byOffset.begin())
      if (Error e = clash(std::prev(next)))
        return e;
    byOffset[v.offset] = id;
    endsAt.insert({l.last, id});
  }
  return Error::success();
}

/// The entries the runtime runs, each with the outputs it reads; `init`
/// setting every state once from the seed; the vocabulary everything that
/// indexes by token agrees on.
Error checkEntries(const Plan &plan) {
  for (const auto &[name, entry] : plan.entries) {
    const plan::EntryInfo *info = nullptr;
    for (const plan::EntryInfo &e : plan::kEntries)
      if (name == e.name)
        info = &e;
    if (!info)
      return fail("entry " + name, "is not an entry the runtime knows");
    std::string outputs = info->outputs;
    while (!outputs.empty()) {
      size_t bar = outputs.find('|');
      std::string out = outputs.substr(0, bar);
      outputs = bar == std::string::npos ? "" : outputs.substr(bar + 1);
      auto it = entry.outputs.find(out);
      if (it == entry.outputs.end())
        return fail("entry " + name, "has no output '" + out + "'");
      const PlanValue &v = plan.values[it->second];
      if (v.dtype != DType::F32 && v.dtype != DType::BF16)
        return fail("entry " + name + " output '" + out + "'",
                    "must be an f32 or bf16 tensor");
      if (v.numElements() < 1)
        return fail("entry " + name + " output '" + out + "'", "is empty");
    }
    if (entry.arenaBytes > plan.arenaBytes)
      return fail("entry " + name, "needs an arena of " +
                                       std::to_string(entry.arenaBytes) +
                                       " bytes, more than the plan's " +
                                       std::to_string(plan.arenaBytes));
    // What is live at the entry's fullest step lies in its arena (the
    // memory check sums these; each is at most 2^62, so compare by
    // subtraction).
    const LiveAtPeak &peak = entry.liveAtPeak;
    int64_t room = entry.arenaBytes;
    for (int64_t part : {peak.parameterCopies, peak.gradients,
                         peak.activations}) {
      if (part > room)
        return fail("entry " + name + " live_at_peak",
                    "holds more bytes than the entry's arena of " +
                        std::to_string(entry.arenaBytes));
      room -= part;
    }
  }
  for (const plan::EntryInfo &e : plan::kEntries)
    if (e.required && !plan.entry(e.name))
      return fail("the plan", std::string("has no '") + e.name + "' entry");
  for (const char *input : {"tokens", "targets", "step", "seed"})
    if (!plan.named(PlanValue::Input, input))
      return fail("the plan", std::string("has no input '") + input + "'");

  std::vector<int> inits(plan.values.size(), 0);
  for (size_t i = 0; i < plan.entry("init")->steps.size(); ++i) {
    const PlanStep &s = plan.entry("init")->steps[i];
    if (s.kind != plan::Op::Init)
      return fail(stepName("init", i, s),
                  "the init entry holds only init steps");
    if (++inits[s.results[0]] > 1)
      return fail(stepName("init", i, s), "state '" +
                                              plan.values[s.results[0]].name +
                                              "' is initialised twice");
  }
  for (const PlanValue &v : plan.values)
    if (v.kind == PlanValue::State && inits[v.id] == 0)
      return fail("entry init", "never initialises state '" + v.name + "'");

  // Token ids index the embedding's rows (a tp rank's slice of them says
  // its vocabulary) and the logits' columns; the loader checks data against
  // vocab_size, so all must agree.
  const PlanValue &tokens = *plan.named(PlanValue::Input, "tokens");
  for (const auto &[name, entry] : plan.entries)
    for (size_t i = 0; i < entry.steps.size(); ++i) {
      const PlanStep &s = entry.steps[i];
      int64_t rows = -1;
      if (s.kind == plan::Op::Embedding)
        rows = s.i64Or("vocab_size", plan.values[s.operands[0]].shape[0]);
      else if (s.kind == plan::Op::EmbeddingGrad)
        rows = s.i64Or("vocab_size", plan.values[s.results[0]].shape[0]);
      else if (s.kind == plan::Op::CrossEntropy ||
               s.kind == plan::Op::CrossEntropyGrad)
        rows = plan.values[s.operands[s.kind == plan::Op::CrossEntropy ? 0 : 1]]
                   .shape.back();
      if (rows >= 0 && rows != plan.vocabSize)
        return fail(stepName(name, i, s), "has a vocabulary of " +
                                              std::to_string(rows) +
                                              " but the plan's vocab_size is " +
                                              std::to_string(plan.vocabSize));
    }
  if (const PlanEntry *logits = plan.entry("logits")) {
    const PlanValue &v = plan.values[logits->outputs.at("logits")];
    if (v.numElements() / plan.vocabSize != tokens.numElements() ||
        v.numElements() % plan.vocabSize != 0)
      return fail("entry logits output 'logits'",
                  "must hold vocab_size logits for each of the " +
                      std::to_string(tokens.numElements()) + " tokens");
  }
  return Error::success();
}

} // namespace

Error verifyPlan(const Plan &plan) {
  if (Error e = checkValues(plan))
    return e;
  for (const auto &[name, entry] : plan.entries)
    for (size_t i = 0; i < entry.steps.size(); ++i) {
      std::string where = stepName(name, i, entry.steps[i]);
      if (Error e = checkResults(plan, entry.steps[i], where))
        return e;
      if (Error e = checkStep(plan, entry.steps[i], where))
        return e;
    }
  if (Error e = checkEntries(plan))
    return e;
  for (const auto &[name, entry] : plan.entries)
    if (Error e = checkEntry(plan, name, entry))
      return e;
  return Error::success();
}

} // namespace kiln::runtime
