package main

// minShare is the fairness figure of a contended round: the smallest
// per-worker acquisition count divided by the mean count. 1 means every
// worker got the same share; 0 means some worker starved (or nobody got
// anything).
func minShare(counts []int) float64 {
	if len(counts) == 0 {
		return 0
	}
	total, least := 0, counts[0]
	for _, c := range counts {
		total += c
		least = min(least, c)
	}
	if total == 0 {
		return 0
	}
	return float64(least) * float64(len(counts)) / float64(total)
}
