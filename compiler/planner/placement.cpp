// placement.cpp — planner step 3: arena offsets.
//
// First-fit (the seeds' choice): allocations in birth order (larger first on
// ties); each takes the lowest offset that does not collide with an already
// placed allocation whose lifetime overlaps its own. Per-token and fixed
// allocations are placed independently (two regions of the arena).
// Naive: every allocation gets its own slot — the no-reuse baseline the
// report compares against.
#include <algorithm>

#include "planner/planner.h"

namespace ckc {

void place(SectionPlan &sp, const PlanOptions &o)
{
    for (int cls = 0; cls < 2; cls++) {
        bool per_token = cls == 0;
        std::vector<Allocation *> todo;
        for (auto &[name, a] : sp.alloc)
            if (a.per_token == per_token) todo.push_back(&a);
        std::sort(todo.begin(), todo.end(), [](const Allocation *a, const Allocation *b) {
            if (a->birth != b->birth) return a->birth < b->birth;
            if (a->size != b->size) return a->size > b->size;
            return a->root < b->root;
        });
        // the placed allocations still alive: born no later than the next one (birth order), so each of them
        // overlaps it in time unless it died before it was born, and then it overlaps no later one either
        std::vector<const Allocation *> placed;
        int64_t end = 0;
        for (Allocation *a : todo) {
            int64_t off = 0;
            if (o.placement == PlacementPolicy::Naive) {
                off = end;
            } else {
                placed.erase(std::remove_if(placed.begin(), placed.end(),
                                            [&](const Allocation *p) { return p->death < a->birth; }),
                             placed.end());
                std::vector<const Allocation *> live(placed);
                std::sort(live.begin(), live.end(), [](auto *x, auto *y) { return x->offset < y->offset; });
                for (const Allocation *p : live) {
                    if (off + a->size <= p->offset) break;  // fits in the gap before p
                    off = std::max(off, p->offset + p->size);
                }
            }
            a->offset = off;
            end = std::max(end, off + a->size);
            placed.push_back(a);
        }
        (per_token ? sp.per_token : sp.fixed).arena = end;
    }
}

}  // namespace ckc
