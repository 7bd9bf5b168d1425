// plan_fuzzer.cc: the plan loader and validator (schema/plan_io.h) over any
// bytes, then what reads a loaded plan: `paraplan inspect` (table and JSON)
// and the model every stage of the runtime builds from it. A plan the
// verifier accepts but validation refuses is printed as a table too (the
// printers tolerate missing tables).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "runtime/model/architecture.h"
#include "runtime/model/model_from_plan.h"
#include "schema/plan_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace paraplan;
  const std::string name = "fuzz.pplan";
  std::vector<uint8_t> bytes(data, data + size);
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (schema::VerifyPlanBuffer(verifier)) (void)plan_to_table(*schema::GetPlan(bytes.data()));
  fuzz::refused_clearly(name, [&] {
    const LoadedPlan loaded = load_plan_from_bytes(name, std::move(bytes));
    const schema::Plan& plan = loaded.plan();
    (void)plan_to_table(plan);
    (void)plan_to_json(plan).dump(2);  // what `inspect --json` prints
    for (int stage = 0; stage < static_cast<int>(plan.stages()->size()); ++stage) {
      const StageModelSpec model = stage_model_from_plan(loaded, stage);
      (void)make_parameter_layout(model.config, model.stage, 0, plan.mesh()->tensor_parallel());
    }
  });
  return 0;
}
