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
        std::vector<const Allocation *> placed;
        int64_t end = 0;
        for (Allocation *a : todo) {
            int64_t off = 0;
            if (o.placement == PlacementPolicy::Naive) {
                off = end;
            } else {
                std::vector<const Allocation *> live;
                for (const Allocation *p : placed)
                    if (p->birth <= a->death && a->birth <= p->death) live.push_back(p);
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
