// reports/roofline.svg of the capability report: the profiled signatures on
// log-log axes under the roofs of their math modes. Each point's area is its
// share of the profiled GPU time, its marker its math mode, its colour its
// stage; the five with the most time are labelled with op and shape; points
// off the axes are drawn hollow at the edge; roof names and legends sit in the
// right margin, clear of the points.
#pragma once

#include <string>
#include <vector>

#include "audit/capability_job.h"

namespace lingprobe::audit {

std::string roofline_svg(const std::vector<Job>& jobs);

}  // namespace lingprobe::audit
